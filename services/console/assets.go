package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assetFiles embed.FS

// assetHandler serves the embedded stylesheet and script under
// /console/assets/, cacheable for an hour.
func assetHandler() http.Handler {
	sub, _ := fs.Sub(assetFiles, "assets") // a constant, valid path
	files := http.StripPrefix(Prefix+"assets/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}
