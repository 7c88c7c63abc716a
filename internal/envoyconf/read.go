// Package envoyconf reads Envoy configurations as Envoy's own v3 types
// (github.com/envoyproxy/go-control-plane) and finds the wasm HTTP filters in
// them, with the connection manager that hosts each one. cmd/sluice (sluice
// validate -envoy) and the e2e tests use it; the plugin never links it.
package envoyconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	yamlv3 "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Kind is what a file holds.
type Kind string

const (
	KindBootstrap Kind = "envoy.config.bootstrap.v3.Bootstrap"
	KindListener  Kind = "envoy.config.listener.v3.Listener"
	KindLDS       Kind = "envoy.service.discovery.v3.DiscoveryResponse"
	KindCluster   Kind = "envoy.config.cluster.v3.Cluster"
)

// Filter is one envoy.filters.http.wasm filter.
type Filter struct {
	Line     int    // 1-based line of its configuration (0 if unknown)
	Path     string // where it is, as Envoy names fields: static_resources.listeners[0]...
	Name     string // config.name
	Listener string // the listener's name ("" if the filter is not in a listener)
	// HCM is the HTTP connection manager whose http_filters hold it (nil
	// if none).
	HCM *hcmv3.HttpConnectionManager
	// Config is the plugin configuration as the plugin receives it (JSON).
	Config []byte
	// Err says why Config could not be read.
	Err error
}

// File is a read configuration.
type File struct {
	Kind    Kind
	Filters []Filter // in the order of their lines
	// Unchecked lists the typed_config types sluice validate does not
	// link (see types.go), with their paths: read as opaque values.
	Unchecked []string
}

// Read parses an Envoy bootstrap, a Listener, a Cluster, a list of
// listeners or clusters (a snippet for static_resources), or a file-based
// xDS document (a DiscoveryResponse), YAML or JSON, as Envoy does: every
// field must be one Envoy knows, every typed_config must name a known type,
// and values must pass Envoy's proto validation rules. The error names the
// field by its path and line.
func Read(src []byte) (*File, error) {
	if !utf8.Valid(src) {
		return nil, errors.New("not UTF-8 text")
	}
	src = bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))
	js, err := yamlToJSON(src)
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %v", err)
	}
	var top any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // numbers pass through as written
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %v", err)
	}
	lines := newLineIndex(src)
	f := &File{}
	// A typed_config of a type this command does not link (types.go lists
	// the extensions it does) is kept as an opaque Struct rather than
	// refused: Envoy may well know it.
	if opaque(top, "", f) {
		if js, err = json.Marshal(top); err != nil {
			return nil, err
		}
	}
	w := walker{file: f, lines: lines}
	if list, ok := top.([]any); ok {
		// A list of listeners or clusters, as a snippet for
		// static_resources (envoy/ratelimit/cluster.yaml).
		for i, item := range list {
			obj, _ := item.(map[string]any)
			kind, msg := KindCluster, proto.Message(&clusterv3.Cluster{})
			if has(obj, "filter_chains", "filterChains", "listener_filters", "listenerFilters", "default_filter_chain") {
				kind, msg = KindListener, &listenerv3.Listener{}
			}
			f.Kind = "list of " + kind
			b, _ := json.Marshal(item)
			prefix := "[" + strconv.Itoa(i) + "]"
			if err := (protojson.UnmarshalOptions{}).Unmarshal(b, msg); err != nil {
				return nil, explainAt(prefix, kind, b, err, lines)
			}
			if err := w.walk(msg.ProtoReflect(), prefix, ctx{}); err != nil {
				return nil, err
			}
		}
		return f, nil
	}
	obj, ok := top.(map[string]any)
	if !ok {
		return nil, errors.New("not an Envoy configuration: the document is neither a mapping nor a list")
	}
	var msg proto.Message
	switch {
	case has(obj, "resources", "version_info", "versionInfo"):
		f.Kind, msg = KindLDS, &discoveryv3.DiscoveryResponse{}
	case has(obj, "filter_chains", "filterChains", "listener_filters", "listenerFilters"):
		f.Kind, msg = KindListener, &listenerv3.Listener{}
	case has(obj, "load_assignment", "loadAssignment", "connect_timeout", "connectTimeout", "lb_policy", "lbPolicy"):
		f.Kind, msg = KindCluster, &clusterv3.Cluster{}
	default:
		f.Kind, msg = KindBootstrap, &bootstrapv3.Bootstrap{}
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, msg); err != nil {
		return nil, explain(f.Kind, js, err, lines)
	}
	if err := w.walk(msg.ProtoReflect(), "", ctx{}); err != nil {
		return nil, err
	}
	sort.SliceStable(f.Filters, func(i, j int) bool { return f.Filters[i].Line < f.Filters[j].Line })
	return f, nil
}

// ctx is what encloses a message.
type ctx struct {
	listener string
	hcm      *hcmv3.HttpConnectionManager
}

type walker struct {
	file  *File
	lines *lineIndex
}

type validator interface{ Validate() error }

func (w *walker) walk(m protoreflect.Message, path string, c ctx) error {
	switch v := m.Interface().(type) {
	case *anypb.Any:
		inner, err := v.UnmarshalNew()
		if err != nil {
			return w.fail(path, fmt.Errorf("%s: %v", v.GetTypeUrl(), err))
		}
		// Envoy checks the proto validation rules of each typed_config.
		if val, ok := inner.(validator); ok {
			if err := val.Validate(); err != nil {
				return w.fail(path, fmt.Errorf("%s: %v", v.GetTypeUrl(), err))
			}
		}
		return w.walk(inner.ProtoReflect(), path, c)
	case *listenerv3.Listener:
		c.listener = v.GetName()
	case *hcmv3.HttpConnectionManager:
		c.hcm = v
	case *wasmv3.Wasm:
		w.file.Filters = append(w.file.Filters, w.wasm(v, path, c))
		return nil
	}
	if path == "" {
		if val, ok := m.Interface().(validator); ok {
			if err := val.Validate(); err != nil {
				return fmt.Errorf("%s: %v", m.Descriptor().FullName(), err)
			}
		}
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		name := join(path, string(fd.Name()))
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = w.walk(l.Get(i).Message(), name+"["+strconv.Itoa(i)+"]", c)
			}
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			var keys []string
			vals := map[string]protoreflect.Message{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				keys = append(keys, k.String())
				vals[k.String()] = mv.Message()
				return true
			})
			sort.Strings(keys)
			for _, k := range keys {
				if err = w.walk(vals[k], name+"."+k, c); err != nil {
					break
				}
			}
		default:
			err = w.walk(v.Message(), name, c)
		}
		return err == nil
	})
	return err
}

func (w *walker) fail(path string, err error) error {
	if l := w.lines.find(path); l > 0 {
		return fmt.Errorf("line %d: %s: %v", l, path, err)
	}
	return fmt.Errorf("%s: %v", path, err)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

const (
	stringType = "type.googleapis.com/google.protobuf.StringValue"
	bytesType  = "type.googleapis.com/google.protobuf.BytesValue"
	structType = "type.googleapis.com/google.protobuf.Struct"
)

func (w *walker) wasm(v *wasmv3.Wasm, path string, c ctx) Filter {
	f := Filter{Path: path, Name: v.GetConfig().GetName(), Listener: c.listener, HCM: c.hcm}
	f.Line = w.lines.first(join(path, "config.configuration.value"), join(path, "config.configuration"), join(path, "config"), path)
	conf := v.GetConfig().GetConfiguration()
	switch {
	case conf == nil:
		f.Err = errors.New("the wasm filter has no configuration (config.configuration)")
	case conf.GetTypeUrl() == stringType:
		var s wrapperspb.StringValue
		if err := conf.UnmarshalTo(&s); err != nil {
			f.Err = err
		} else {
			f.Config = []byte(s.GetValue())
		}
	case conf.GetTypeUrl() == bytesType:
		// Envoy hands the plugin the bytes as they are.
		var b wrapperspb.BytesValue
		if err := conf.UnmarshalTo(&b); err != nil {
			f.Err = err
		} else {
			f.Config = b.GetValue()
		}
	case conf.GetTypeUrl() == structType:
		// Envoy hands the plugin the Struct serialized as JSON.
		var s structpb.Struct
		if err := conf.UnmarshalTo(&s); err != nil {
			f.Err = err
		} else if f.Config, f.Err = protojson.Marshal(&s); f.Err != nil {
			f.Config = nil
		}
	default:
		f.Err = fmt.Errorf("the configuration is a %s: use google.protobuf.StringValue (a JSON document), BytesValue or Struct", strings.TrimPrefix(conf.GetTypeUrl(), "type.googleapis.com/"))
	}
	return f
}

// protojson's errors locate the problem by an offset in the JSON text;
// explain turns it into the field's path, as Envoy reports it, and its line
// in the source.
var unknownRE = regexp.MustCompile(`^unknown field "([^"]*)"`)

var offsetRE = regexp.MustCompile(`^proto:\s*\(line (\d+):(\d+)\):\s*(.*)$`)

// opaque replaces, in place, every object whose "@type" names a message
// type that is not linked by a google.protobuf.Struct Any holding its
// other members, and records it in f.Unchecked.
func opaque(v any, path string, f *File) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		changed = typedStruct(x)
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k != "@type" && opaque(x[k], join(path, k), f) {
				changed = true
			}
		}
		url, ok := x["@type"].(string)
		if !ok {
			break
		}
		if _, err := protoregistry.GlobalTypes.FindMessageByURL(url); err == nil || !strings.Contains(url, "/envoy.") {
			break
		}
		// A type missing from a package that is linked is misspelled:
		// Envoy refuses it, and so does protojson.
		name := protoreflect.FullName(url[strings.LastIndexByte(url, '/')+1:])
		known := false
		protoregistry.GlobalFiles.RangeFilesByPackage(name.Parent(), func(protoreflect.FileDescriptor) bool {
			known = true
			return false
		})
		if known {
			break
		}
		rest := map[string]any{}
		for k, val := range x {
			if k != "@type" {
				rest[k] = val
				delete(x, k)
			}
		}
		x["@type"] = structType
		x["value"] = rest
		f.Unchecked = append(f.Unchecked, string(name)+" at "+path)
		changed = true
	case []any:
		for i, e := range x {
			if opaque(e, path+"["+strconv.Itoa(i)+"]", f) {
				changed = true
			}
		}
	}
	return changed
}

// typedStruct rewrites, in place, an xds.type.v3.TypedStruct or
// udpa.type.v1.TypedStruct ({"@type": ..., "type_url": T, "value": {...}})
// as the message T it stands for ({"@type": T, ...}), as Envoy reads it, so
// that the message is checked (and a wasm filter in it found) like any
// other typed_config.
func typedStruct(x map[string]any) bool {
	url, _ := x["@type"].(string)
	if !strings.HasSuffix(url, "/xds.type.v3.TypedStruct") && !strings.HasSuffix(url, "/udpa.type.v1.TypedStruct") {
		return false
	}
	inner, _ := x["type_url"].(string)
	if inner == "" {
		inner, _ = x["typeUrl"].(string)
	}
	value, ok := x["value"].(map[string]any)
	if inner == "" || !ok && x["value"] != nil {
		return false
	}
	clear(x)
	for k, val := range value {
		x[k] = val
	}
	x["@type"] = inner
	return true
}

func has(obj map[string]any, keys ...string) bool {
	for _, k := range keys {
		if _, ok := obj[k]; ok {
			return true
		}
	}
	return false
}

func explain(kind Kind, js []byte, err error, lines *lineIndex) error {
	return explainAt("", kind, js, err, lines)
}

func explainAt(prefix string, kind Kind, js []byte, err error, lines *lineIndex) error {
	msg := err.Error()
	m := offsetRE.FindStringSubmatch(strings.ReplaceAll(msg, "\u00a0", " "))
	if m == nil {
		return fmt.Errorf("%s: %s", kind, strings.TrimPrefix(msg, "proto: "))
	}
	col, _ := strconv.Atoi(m[2]) // YAMLToJSON writes one line
	path := jsonPathAt(js, col-1)
	if prefix != "" {
		path = strings.TrimSuffix(prefix+"."+path, ".")
	}
	what := m[3]
	if f := unknownRE.FindStringSubmatch(what); f != nil {
		// Envoy 1.40: "Protobuf message (type envoy.config.bootstrap.v3.Bootstrap
		// reason INVALID_ARGUMENT: invalid JSON in ... @ <path>: message <type>,
		// near ...: no such field: 'vm_confg') has unknown fields"
		what += " (Envoy: no such field: '" + f[1] + "', has unknown fields)"
	}
	where := path
	if where == "" {
		where = "(top level)"
	}
	if l := lines.find(path); l > 0 {
		return fmt.Errorf("line %d: %s: %s (as %s)", l, where, what, kind)
	}
	return fmt.Errorf("%s: %s (as %s)", where, what, kind)
}

// jsonPathAt returns the path (a.b[2].c) of the key or value that ends
// after byte offset off of a JSON document.
func jsonPathAt(js []byte, off int) string {
	type frame struct {
		obj     bool
		wantKey bool
		key     string
		index   int
	}
	var st []*frame
	render := func() string {
		var b strings.Builder
		for _, f := range st {
			switch {
			case f.obj && f.key != "":
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			case !f.obj && f.index >= 0:
				fmt.Fprintf(&b, "[%d]", f.index)
			}
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	for {
		tok, err := dec.Token()
		if err != nil {
			return render()
		}
		var top *frame
		if len(st) > 0 {
			top = st[len(st)-1]
		}
		d, isDelim := tok.(json.Delim)
		closing := isDelim && (d == '}' || d == ']')
		switch {
		case top != nil && top.obj && top.wantKey && !closing:
			top.key, _ = tok.(string)
			top.wantKey = false
		case closing:
			st = st[:len(st)-1]
			if len(st) > 0 && st[len(st)-1].obj {
				st[len(st)-1].wantKey = true
			}
		default: // a value
			if top != nil && !top.obj {
				top.index++
			}
			if isDelim {
				st = append(st, &frame{obj: d == '{', wantKey: d == '{', index: -1})
			} else if top != nil && top.obj {
				top.wantKey = true
			}
		}
		if int(dec.InputOffset()) > off {
			return render()
		}
	}
}

// lineIndex finds the line of a field path in the YAML (or JSON) source.
type lineIndex struct{ root *yamlv3.Node }

func newLineIndex(src []byte) *lineIndex {
	var n yamlv3.Node
	if yamlv3.Unmarshal(src, &n) != nil {
		return &lineIndex{}
	}
	return &lineIndex{root: &n}
}

// first returns the line of the first of paths that is found.
func (x *lineIndex) first(paths ...string) int {
	for _, p := range paths {
		if l := x.find(p); l > 0 {
			return l
		}
	}
	return 0
}

var segRE = regexp.MustCompile(`^([^\[]*)((?:\[\d+\])*)$`)

// find returns the line of the key (or list item) at path, 0 if not found.
// Field names match in snake_case or camelCase; the members of an Any's
// message are in the Any's own mapping, as Envoy writes them.
func (x *lineIndex) find(path string) int {
	n := x.root
	if n == nil {
		return 0
	}
	if n.Kind == yamlv3.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	if path == "" {
		return line
	}
	parts := strings.Split(path, ".")
	for i := 0; i < len(parts); {
		k := 0
		if k, line, n = step(n, line, parts[i:]); k == 0 {
			return 0
		}
		i += k
	}
	return line
}

// step follows the first segment of parts from n (at line): a key with
// its list indexes. The key may itself hold dots (the extension names that
// key typed_extension_protocol_options): the shortest run of parts that n
// has as a key is taken. It returns how many parts it took (0 if none),
// and the line and node it reached.
func step(n *yamlv3.Node, line int, parts []string) (int, int, *yamlv3.Node) {
	for k := 1; k <= len(parts); k++ {
		m := segRE.FindStringSubmatch(strings.Join(parts[:k], "."))
		if m == nil {
			continue
		}
		at, l := n, line
		if m[1] != "" {
			key, val := member(n, m[1])
			if key == nil {
				continue
			}
			at, l = val, key.Line
		}
		for _, idx := range regexp.MustCompile(`\d+`).FindAllString(m[2], -1) {
			i, _ := strconv.Atoi(idx)
			for at.Kind == yamlv3.AliasNode {
				at = at.Alias
			}
			if at.Kind != yamlv3.SequenceNode || i >= len(at.Content) {
				return 0, 0, nil
			}
			at = at.Content[i]
			l = at.Line
		}
		return k, l, at
	}
	return 0, 0, nil
}

// member returns the key and value nodes of name in mapping n (nil if it
// has none). The members of a TypedStruct's value are looked up in the
// value, as Read moves them up to the TypedStruct (see typedStruct).
func member(n *yamlv3.Node, name string) (*yamlv3.Node, *yamlv3.Node) {
	for n.Kind == yamlv3.AliasNode {
		n = n.Alias
	}
	if n.Kind != yamlv3.MappingNode {
		return nil, nil
	}
	var value *yamlv3.Node
	typed := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if norm(k.Value) == norm(name) {
			return k, n.Content[i+1]
		}
		switch norm(k.Value) {
		case "value":
			value = n.Content[i+1]
		case "typeurl":
			typed = true
		}
	}
	if typed && value != nil {
		return member(value, name)
	}
	return nil, nil
}

func norm(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
