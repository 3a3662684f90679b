// Package testbin is the one harness that builds the branchnfs binary and
// runs it as real processes for the black-box suites (tests/e2e,
// tests/faults, tests/kernel, and the CLI's own tests): it builds a main
// package once into a directory every user can reach, starts `branchnfs
// serve` as a given user and waits until its control API answers, runs CLI
// commands as that user, and skips a test whose prerequisite is missing,
// except under CI=true, where it fails instead.
//
// Servers and commands run as the user a test names. When the tests run as
// root that is usually a regular uid (as users run the server), set with
// SysProcAttr.Credential; otherwise it is the user running the tests.
package testbin
