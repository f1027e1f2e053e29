// Package console is the web console the node serves at /console: a page
// and its script and style, embedded in the binary (no CDN: it works
// where the browser reaches only the node). The page signs in with an API
// key kept in the tab's session storage and reads the same API as any
// client; it holds no state on the server.
package console

import (
	"embed"
	"path"

	"github.com/valyala/fasthttp"
)

//go:embed static
var static embed.FS

// Files are the console's paths and the embedded files behind them.
var Files = map[string]string{
	"/console":         "static/index.html",
	"/console/app.js":  "static/app.js",
	"/console/app.css": "static/app.css",
}

var types = map[string]string{".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

// Serve answers the console's file at the request's path.
func Serve(ctx *fasthttp.RequestCtx) {
	name, ok := Files[string(ctx.Path())]
	if !ok {
		ctx.NotFound()
		return
	}
	data, err := static.ReadFile(name)
	if err != nil {
		ctx.Error("console file missing", fasthttp.StatusInternalServerError)
		return
	}
	h := &ctx.Response.Header
	h.Set("Content-Type", types[path.Ext(name)])
	// Only its own script and style, and the API of the same origin.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	ctx.SetBody(data)
}
