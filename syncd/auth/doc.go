// Package auth holds what a syncd node trusts and proves: device tokens (MintToken,
// VerifyToken) signed with the node's token secret, the secret, admin token and certificate files
// in the data directory (LoadOrCreateSecret, LoadOrCreateAdminToken, SelfSignedCert, LoadCert),
// certificate fingerprints that clients pin, the server's TLS configuration, and the node
// plane's cluster CA and node certificates (nodecert.go: CreateCA, CreateNodeCert,
// LoadNodeCerts, NodeID), which syncd, `syncctl cert` and the test harnesses all make and read
// here.
//
// It imports only the standard library (and proto for the fingerprint format clients share,
// adminapi for the admin token's file name and format), so syncctl can mint tokens and read
// fingerprints without linking the server.
package auth
