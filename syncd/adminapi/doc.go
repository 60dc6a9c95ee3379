// Package adminapi holds the JSON shapes of a syncd node's admin HTTP API (/v1/...): the
// cluster view, cursor and trace reports, dead letters, replica checks and the error body, with
// the constants and id formats that both ends use, and the admin token's file and format
// (token.go), and TakeBackup, the client side of a backup (syncctl backup's, and the conformance
// kit's). The server (syncd/admin) answers with them and syncctl decodes them, so the package
// imports nothing but the standard library: a tool that talks to the admin API links none of the
// server (no Raft, no Pebble).
//
// Fields are only added, never renamed: operators' scripts read these documents.
package adminapi
