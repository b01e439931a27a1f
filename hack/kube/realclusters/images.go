package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The real nodes' images, with no registry (docs/src/testing/real-nodes.md):
// each is an OCI image layout tar of one uncompressed layer, made here from
// files of this host and imported into every node's containerd. The tars
// are cached beside the components (target/kube/images) and made again
// when a file they are made from is newer.
const (
	pauseImage      = "localhost/tfjob-federator/pause:3"
	pythonImage     = "localhost/tfjob-federator/python:3"
	tensorflowImage = "localhost/tfjob-federator/tensorflow:2.21.0"
)

// imageSpec is what an image holds: host folders and files copied at
// their own paths (with every symlink on the way; skip names what of them
// to leave out), the shared libraries that the ELF files below libsOf
// load, files copied to names of their own, and how it starts.
type imageSpec struct {
	name       string
	trees      []string
	skip       map[string]bool
	libsOf     []string
	files      map[string]string // name in the image → host path
	entrypoint []string
	cmd        []string
	env        []string
}

// hostPython is the interpreter of the python image: Debian's, whose
// standard library lives in one folder.
const hostPython = "/usr/bin/python3.11"

func imageSpecs(bin string) ([]imageSpec, error) {
	if _, err := os.Stat(hostPython); err != nil {
		return nil, fmt.Errorf("the python image: %s is missing (Debian's python3.11 package)", hostPython)
	}
	return []imageSpec{
		{name: pauseImage, files: map[string]string{"pause": filepath.Join(bin, "pause")}, entrypoint: []string{"/pause"}},
		pythonSpec(pythonImage, hostPython, nil, []string{"PATH=/usr/local/bin:/usr/bin:/bin"}),
		corednsImageSpec(bin),
	}, nil
}

// pythonSpec: an interpreter, its standard library without its own test
// suite (a third of it), the folders in extra, and every shared library
// the interpreter or an extension module loads.
func pythonSpec(name, interpreter string, extra, env []string) imageSpec {
	prefix := filepath.Dir(filepath.Dir(interpreter))
	stdlib := filepath.Join(prefix, "lib", filepath.Base(interpreter))
	trees := append([]string{interpreter, filepath.Join(filepath.Dir(interpreter), "python3"), stdlib}, extra...)
	return imageSpec{
		name: name, trees: trees, skip: map[string]bool{filepath.Join(stdlib, "test"): true},
		libsOf: append([]string{interpreter, filepath.Join(stdlib, "lib-dynload")}, extra...),
		cmd:    []string{"python3"}, env: env,
	}
}

// tensorflowSpec is the TensorFlow image: the virtual environment
// hack/tf-venv makes (tensorflow-cpu, pinned), at its own path and first
// on PATH, with the interpreter it was made from, and the example
// programs of config/examples/tensorflow in /examples.
func tensorflowSpec(venv, examples string) (imageSpec, error) {
	config, err := os.ReadFile(filepath.Join(venv, "pyvenv.cfg"))
	if err != nil {
		return imageSpec{}, fmt.Errorf("the TensorFlow image: %w (hack/tf-venv makes it)", err)
	}
	interpreter := ""
	for _, line := range strings.Split(string(config), "\n") {
		if key, value, ok := strings.Cut(line, "="); ok && strings.TrimSpace(key) == "executable" {
			interpreter = strings.TrimSpace(value)
		}
	}
	if interpreter == "" {
		return imageSpec{}, fmt.Errorf("%s/pyvenv.cfg names no executable", venv)
	}
	spec := pythonSpec(tensorflowImage, interpreter, []string{venv}, []string{"PATH=" + filepath.Join(venv, "bin") + ":/usr/local/bin:/usr/bin:/bin"})
	programs, _ := filepath.Glob(filepath.Join(examples, "*.py"))
	spec.files = map[string]string{}
	for _, program := range programs {
		spec.files["examples/"+filepath.Base(program)] = program
	}
	return spec, nil
}

// sharedLibraries: what ldd says the ELF files at or below roots load.
func sharedLibraries(roots []string) []string {
	var objects []string
	for _, root := range roots {
		_ = filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
			if err == nil && info.Mode().IsRegular() && (path == root || strings.Contains(filepath.Base(path), ".so")) {
				objects = append(objects, path)
			}
			return nil
		})
	}
	var libraries []string
	for len(objects) > 0 {
		batch := objects[:min(len(objects), 200)]
		objects = objects[len(batch):]
		// ldd fails for a file that is not dynamic; the others are still listed.
		out, _ := exec.Command("ldd", batch...).Output()
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(line, "\t") {
				continue // a file's own name, not what it loads
			}
			for _, field := range strings.Fields(line) {
				if strings.HasPrefix(field, "/") {
					libraries = append(libraries, field)
				}
			}
		}
	}
	return libraries
}

// imageTar is the cached layout tar of spec, made if missing or older than
// a file it is made from.
func imageTar(cache string, spec imageSpec) (string, error) {
	file := filepath.Join(cache, strings.NewReplacer("/", "_", ":", "_").Replace(spec.name)+".tar")
	sources := append([]string{}, spec.trees...)
	for _, host := range spec.files {
		sources = append(sources, host)
	}
	if info, err := os.Stat(file); err == nil && !newerThan(sources, info.ModTime()) {
		return file, nil
	}
	started := time.Now()
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// Launchers side by side may make the same image at once: each writes
	// files of its own and the last rename wins (the same content).
	own := fmt.Sprintf("%s.%d", file, os.Getpid())
	layer, err := writeLayer(own+".layer", spec)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", spec.name, err)
	}
	defer os.Remove(layer.path)
	partial := own + ".partial"
	defer os.Remove(partial) // gone once renamed; left by a failure otherwise
	if err := writeLayout(partial, spec, layer); err != nil {
		return "", fmt.Errorf("image %s: %w", spec.name, err)
	}
	logf("image %s: %d MiB, made in %.1fs", spec.name, layer.size>>20, time.Since(started).Seconds())
	return file, os.Rename(partial, file)
}

// newerThan: a file among paths (a folder's, walked) was changed after t.
func newerThan(paths []string, t time.Time) bool {
	for _, path := range paths {
		newer := false
		_ = filepath.Walk(path, func(_ string, info os.FileInfo, err error) error {
			if err == nil && info.ModTime().After(t) {
				newer = true
				return filepath.SkipAll
			}
			return nil
		})
		if newer {
			return true
		}
	}
	return false
}

// layerFile is a layer written to path, with its digest and size.
type layerFile struct {
	path, digest string
	size         int64
}

// countingWriter counts what passes through it.
type countingWriter struct {
	out io.Writer
	n   int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.out.Write(p)
	w.n += int64(n)
	return n, err
}

// writeLayer writes the layer of spec to path, hashing it on the way.
func writeLayer(path string, spec imageSpec) (layerFile, error) {
	out, err := os.Create(path)
	if err != nil {
		return layerFile{}, err
	}
	defer out.Close()
	hash := sha256.New()
	counted := &countingWriter{out: io.MultiWriter(out, hash)}
	b := &layerBuilder{out: tar.NewWriter(counted), added: map[string]bool{}, walked: map[string]bool{}, skip: spec.skip}
	if err := b.header(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}); err != nil {
		return layerFile{}, err
	}
	for _, tree := range append(append([]string{}, spec.trees...), sharedLibraries(spec.libsOf)...) {
		if err := b.add(tree, true); err != nil {
			return layerFile{}, err
		}
	}
	names := make([]string, 0, len(spec.files))
	for name := range spec.files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if dir := filepath.Dir(name); dir != "." && !b.added["/"+dir] {
			b.added["/"+dir] = true
			if err := b.header(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755}); err != nil {
				return layerFile{}, err
			}
		}
		if err := b.file(name, spec.files[name]); err != nil {
			return layerFile{}, err
		}
	}
	if err := b.out.Close(); err != nil {
		return layerFile{}, err
	}
	return layerFile{path: path, digest: "sha256:" + hex.EncodeToString(hash.Sum(nil)), size: counted.n}, nil
}

// layerBuilder writes a tar of host paths under their own names, each entry
// once, with fixed times so that the same files give the same digest.
type layerBuilder struct {
	out    *tar.Writer
	added  map[string]bool // entries written
	walked map[string]bool // folders written with all they hold
	skip   map[string]bool
}

func (b *layerBuilder) header(h *tar.Header) error {
	h.ModTime, h.Uid, h.Gid, h.Format = time.Unix(0, 0), 0, 0, tar.FormatPAX
	return b.out.WriteHeader(h)
}

// add writes path: its parent folders first (a symlinked one as the
// symlink and its target), then the path itself, a folder with all it holds
// when whole.
func (b *layerBuilder) add(path string, whole bool) error {
	path = filepath.Clean(path)
	if path == "/" || b.skip[path] || (b.added[path] && (!whole || b.walked[path])) {
		return nil
	}
	if err := b.add(filepath.Dir(path), false); err != nil {
		return err
	}
	info, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !b.added[path] {
		b.added[path] = true
		if err := b.entry(path, info); err != nil {
			return err
		}
	}
	if info.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		return b.add(target, whole)
	}
	if !info.IsDir() || !whole || b.walked[path] {
		return nil
	}
	b.walked[path] = true
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, entry := range entries {
		if err := b.add(filepath.Join(path, entry.Name()), true); err != nil {
			return err
		}
	}
	return nil
}

// entry writes the one tar entry of path.
func (b *layerBuilder) entry(path string, info os.FileInfo) error {
	name := strings.TrimPrefix(path, "/")
	switch {
	case info.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		return b.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777})
	case info.IsDir():
		return b.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(info.Mode().Perm())})
	case info.Mode().IsRegular():
		return b.file(name, path)
	default:
		return nil // sockets, devices: no image needs them
	}
}

// file writes the regular file at host path as name.
func (b *layerBuilder) file(name, host string) error {
	in, err := os.Open(host)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	if err := b.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(info.Mode().Perm()), Size: info.Size()}); err != nil {
		return err
	}
	_, err = io.Copy(b.out, in)
	return err
}

// writeLayout writes to path an OCI image layout tar of one image:
// index.json naming it (the annotation `ctr images import` takes the name
// from), its manifest, config and layer.
func writeLayout(path string, spec imageSpec, layer layerFile) error {
	blobs := map[string][]byte{}
	blob := func(content []byte, mediaType string) map[string]any {
		sum := sha256.Sum256(content)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		blobs[digest] = content
		return map[string]any{"digest": digest, "size": len(content), "mediaType": mediaType}
	}
	layerRef := map[string]any{"digest": layer.digest, "size": layer.size, "mediaType": "application/vnd.oci.image.layer.v1.tar"}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": spec.entrypoint, "Cmd": spec.cmd, "Env": spec.env},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layer.digest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": blob(config, "application/vnd.oci.image.config.v1+json"), "layers": []any{layerRef},
	})
	if err != nil {
		return err
	}
	manifestRef := blob(manifest, "application/vnd.oci.image.manifest.v1+json")
	manifestRef["annotations"] = map[string]string{"io.containerd.image.name": spec.name}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{manifestRef}})
	if err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer out.Close()
	layout := tar.NewWriter(out)
	entry := func(name string, size int64, content io.Reader) error {
		if err := layout.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := io.Copy(layout, content)
		return err
	}
	small := func(name string, content []byte) error {
		return entry(name, int64(len(content)), bytes.NewReader(content))
	}
	if err := small("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := small("index.json", index); err != nil {
		return err
	}
	for digest, content := range blobs {
		if err := small("blobs/sha256/"+strings.TrimPrefix(digest, "sha256:"), content); err != nil {
			return err
		}
	}
	layerIn, err := os.Open(layer.path)
	if err != nil {
		return err
	}
	defer layerIn.Close()
	if err := entry("blobs/sha256/"+strings.TrimPrefix(layer.digest, "sha256:"), layer.size, layerIn); err != nil {
		return err
	}
	if err := layout.Close(); err != nil {
		return err
	}
	return out.Close()
}
