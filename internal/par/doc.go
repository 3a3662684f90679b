// Package par runs the two halves of one request's work at once: the
// blocks of a READ that cowfs assembles from chunks and patches, where
// halving the time the work takes halves most of the server's share of
// the request's latency, on a core that would otherwise wait.
package par
