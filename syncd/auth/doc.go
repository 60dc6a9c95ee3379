// Package auth holds what a syncd node trusts and proves: device tokens (MintToken,
// VerifyToken) signed with the node's token secret, the secret, admin token and certificate files
// in the data directory (LoadOrCreateSecret, LoadOrCreateAdminToken, SelfSignedCert, LoadCert),
// certificate fingerprints that clients pin, and the server's TLS configuration.
//
// It imports only the standard library (and proto for the fingerprint format clients share,
// adminapi for the admin token's file name and format), so syncctl can mint tokens and read
// fingerprints without linking the server.
package auth
