// Package syncd is the syncd server: it routes users and conversations to shards, drains each
// shard's outbox into the user logs of the recipients (fan-out), and (as the server grows) serves
// clients over QUIC.
//
// See DESIGN.md in this folder and docs/ARCHITECTURE.md.
package syncd
