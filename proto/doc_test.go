package proto

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestProtocolDocCoversWire keeps docs/PROTOCOL.md in step with the code: every frame type with
// its number, every field key, and every code with its number and name must appear in it.
func TestProtocolDocCoversWire(t *testing.T) {
	data, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, typ := range Types() {
		f := newFrame(typ)
		name := reflect.TypeOf(f).Elem().Name()
		if want := fmt.Sprintf("**%d `%s`**", typ, name); !strings.Contains(doc, want) {
			t.Errorf("PROTOCOL.md lacks the frame heading %s", want)
		}
		for _, key := range tagKeys(reflect.TypeOf(f).Elem()) {
			if !strings.Contains(doc, "`"+key+"`") {
				t.Errorf("PROTOCOL.md never mentions the key `%s` of %s", key, name)
			}
		}
	}
	for _, c := range Codes() {
		if want := fmt.Sprintf("| %d | `%s` |", c, c); !strings.Contains(doc, want) {
			t.Errorf("PROTOCOL.md lacks the code row %s", want)
		}
	}
	if !strings.Contains(doc, "`"+ALPN+"`") {
		t.Errorf("PROTOCOL.md does not name the ALPN %s", ALPN)
	}
}

// tagKeys returns the msgpack keys of t's fields and of the structs they hold.
func tagKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		keys = append(keys, strings.Split(f.Tag.Get("msgpack"), ",")[0])
		ft := f.Type
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			keys = append(keys, tagKeys(ft)...)
		}
	}
	return keys
}
