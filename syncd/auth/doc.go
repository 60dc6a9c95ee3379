// Package auth holds what a syncd node trusts and proves to devices: device tokens (MintToken,
// VerifyToken) signed with the node's token secret, the secret, admin token and certificate files
// in the data directory (LoadOrCreateSecret, LoadOrCreateAdminToken, SelfSignedCert, LoadCert),
// certificate fingerprints that clients pin, and the server's TLS configuration. The node plane's
// cluster CA and node certificates are raftstore/nodecert's, beside the code that verifies them;
// auth writes its own certificate and key files with that package's helpers, so there is one copy
// of them.
//
// It imports only the standard library (and proto for the fingerprint format clients share,
// adminapi for the admin token's file name and format, raftstore/nodecert, a leaf, for those
// helpers), so syncctl can mint tokens and read fingerprints without linking the server.
package auth
