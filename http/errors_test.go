package httpapi

import (
	"os"
	"strings"
	"testing"

	"github.com/wts-project/wts/actors/protocol"
)

// Every code the server can answer with is documented, with its status.
func TestErrorCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	for code := range statuses {
		if !strings.Contains(string(doc), "`"+code+"`") {
			t.Errorf("docs/errors.md does not describe %s", code)
		}
	}
	for _, code := range []string{protocol.CodeInterrupted, protocol.CodeCancelled, protocol.CodePoisoned, protocol.CodeTimedOut} {
		if !strings.Contains(string(doc), "`"+code+"`") {
			t.Errorf("docs/errors.md does not describe %s", code)
		}
	}
}
