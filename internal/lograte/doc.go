// Package lograte limits the log lines of events that whoever can reach a
// server may cause at will (refused connections, refused requests), so
// that they cannot flood its log: the first is logged, then one every
// Every, each saying how many went unlogged since the last line.
package lograte
