package syncd

import (
	"testing"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
)

// TestKindsAndRolesMatch pins the numbers the storage core and the wire share by a plain cast
// (wireEntry): every kind and role is the same number with the same name on both sides, and
// the first number past the last kind is unknown to both.
func TestKindsAndRolesMatch(t *testing.T) {
	for k := log.Kind(0); k < 32; k++ {
		if k.Valid() != proto.Kind(k).Valid() || k.Valid() && k.String() != proto.Kind(k).String() {
			t.Errorf("kind %d: log %q (valid %v), proto %q (valid %v)", k, k, k.Valid(), proto.Kind(k), proto.Kind(k).Valid())
		}
	}
	for r := log.Role(0); r < 8; r++ {
		if r.Valid() != proto.Role(r).Valid() || r.Valid() && r.String() != proto.Role(r).String() {
			t.Errorf("role %d: log %q (valid %v), proto %q (valid %v)", r, r, r.Valid(), proto.Role(r), proto.Role(r).Valid())
		}
	}
}
