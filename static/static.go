// Package static holds the embedded stylesheets, scripts and images served
// under /static/. Paths carry a content hash so they can be cached forever.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
)

//go:embed assets
var assets embed.FS

// FS is the asset tree, rooted so that "app.css" names assets/app.css.
var FS, _ = fs.Sub(assets, "assets")

var versions = func() map[string]string {
	m := map[string]string{}
	_ = fs.WalkDir(FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(FS, path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[path] = hex.EncodeToString(sum[:6])
		return nil
	})
	return m
}()

// Path returns the public URL of an asset with its content version, e.g.
// "/static/app.css?v=3f2a…", so a changed file is fetched afresh.
func Path(name string) string {
	return "/static/" + name + "?v=" + versions[name]
}
