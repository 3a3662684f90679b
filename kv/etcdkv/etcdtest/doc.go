// Package etcdtest starts real etcd clusters for tests, in process, with the
// etcd server's embed package: each member on free loopback ports, with its
// data in a temporary directory, stopped when the test ends. NewStore opens
// an etcdkv store on such a cluster under a key prefix of its own, so that
// many stores share one cluster.
package etcdtest
