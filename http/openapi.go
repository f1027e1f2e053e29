package httpapi

import (
	_ "embed"
	"encoding/json"
	"sync"
)

// openapiSource is the API's OpenAPI 3.1 document as written: each body is
// described once, as application/json.
//
//go:embed openapi.json
var openapiSource []byte

// OpenAPI is the document the service serves at /v1/openapi.json: the
// source with application/msgpack beside every application/json body,
// since every body may be either (format.go).
var OpenAPI = sync.OnceValue(func() []byte {
	var doc any
	if err := json.Unmarshal(openapiSource, &doc); err != nil {
		panic("openapi.json: " + err.Error()) // embedded at build time; TestOpenAPI reads it
	}
	withMsgpack(doc)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic("openapi.json: " + err.Error())
	}
	return out
})

// withMsgpack adds application/msgpack to every content map that has
// application/json, with the same schema.
func withMsgpack(v any) {
	switch v := v.(type) {
	case map[string]any:
		if content, ok := v["content"].(map[string]any); ok {
			if js, ok := content[mimeJSON]; ok {
				content[mimeMsgpack] = js
			}
		}
		for _, x := range v {
			withMsgpack(x)
		}
	case []any:
		for _, x := range v {
			withMsgpack(x)
		}
	}
}
