package persistence

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// Every field of Run but NextSeqID, changed alone, makes a different record.
func TestRunSameRecord(t *testing.T) {
	base := Run{ID: "run-1", Metadata: json.RawMessage(`{"a":1}`), CreatedAt: time.Unix(1, 0)}
	if b := base; !b.SameRecord(&base) {
		t.Fatal("a copy differs from its run")
	}
	typ := reflect.TypeFor[Run]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		changed := base
		v := reflect.ValueOf(&changed).Elem().Field(i)
		switch x := v.Addr().Interface().(type) {
		case *string:
			*x += "x"
		case *int64:
			*x++
		case *int:
			*x++
		case *bool:
			*x = !*x
		case *json.RawMessage:
			*x = json.RawMessage(`{"a":2}`)
		case *time.Time:
			*x = x.Add(time.Second)
		case *Tenant:
			x.Org += "x"
		case *LoRA:
			x.Rank++
		default:
			t.Fatalf("field %s: the test cannot change a %s; teach it", f.Name, f.Type)
		}
		if same := changed.SameRecord(&base); same != (f.Name == "NextSeqID") {
			t.Errorf("field %s changed: SameRecord = %v", f.Name, same)
		}
	}
}
