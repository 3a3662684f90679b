// Package par runs the two halves of one request's work at once: a READ's
// block reads in the store (kv) and in the file system (cowfs), where
// halving the time the copies take halves most of the server's share of
// the request's latency, on a core that would otherwise wait.
package par
