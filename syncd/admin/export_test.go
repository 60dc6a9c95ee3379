package admin

// WantOpsError is wantOpsError for the tests of package admin_test.
var WantOpsError = wantOpsError
