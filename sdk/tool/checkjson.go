package tool

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolfleet/toolfleet/sdk/schema"
)

// checkJSON walks a JSON input against a message descriptor the way protojson
// decodes it and reports every problem by JSON path, so that a model learns all of
// its mistakes at once and where they are (protojson stops at the first one and
// names no path).
//
// Enum values may be given by their model names (schema.Enum): when the input
// uses any, checkJSON returns it again with those replaced by the proto names
// protojson decodes; otherwise the returned input is nil.
func checkJSON(md protoreflect.MessageDescriptor, input []byte) ([]byte, map[string]string) {
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, map[string]string{RootPath: "is not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, map[string]string{RootPath: "must be a single JSON object"}
	}
	c := &jsonChecker{errs: map[string]string{}}
	c.message("", v, md)
	if len(c.errs) > 0 || !c.renamed {
		return nil, c.errs
	}
	if !utf8.Valid(input) {
		// encoding/json replaced invalid UTF-8; protojson must see the original and refuse it.
		return nil, nil
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, map[string]string{RootPath: "is not valid JSON: " + err.Error()}
	}
	return out, nil
}

type jsonChecker struct {
	errs    map[string]string
	renamed bool // an enum value was given by its model name and replaced
}

func (c *jsonChecker) fail(path, msg string) {
	if path == "" {
		path = RootPath
	}
	if _, dup := c.errs[path]; !dup {
		c.errs[path] = msg
	}
}

// fieldByKey finds the field a JSON key names: its JSON name or its proto name, as
// protojson accepts both.
func fieldByKey(fields protoreflect.FieldDescriptors, key string) protoreflect.FieldDescriptor {
	if fd := fields.ByJSONName(key); fd != nil {
		return fd
	}
	return fields.ByTextName(key)
}

// keysInFieldOrder orders an object's keys by the declaration order of the fields they
// name, unknown keys last by name, so that the same input always gets the same
// errors (e.g. which of two oneof members is blamed) whatever Go's map order.
func keysInFieldOrder(obj map[string]any, fields protoreflect.FieldDescriptors) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	rank := func(k string) int {
		if fd := fieldByKey(fields, k); fd != nil {
			return fd.Index()
		}
		return fields.Len()
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (c *jsonChecker) message(path string, v any, md protoreflect.MessageDescriptor) {
	if wellKnown(md.FullName()) {
		c.wellKnown(path, v, md)
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		c.fail(path, "must be an object")
		return
	}
	fields := md.Fields()
	for _, fd := range schema.RequiredFields(md) {
		val, ok := obj[fd.JSONName()]
		if !ok {
			val, ok = obj[string(fd.Name())]
		}
		if !ok || val == nil { // null means "not set"
			c.fail(join(path, fd.JSONName()), "is required")
		}
	}
	oneofSet := map[protoreflect.FullName]string{}
	for _, key := range keysInFieldOrder(obj, fields) {
		val := obj[key]
		fd := fieldByKey(fields, key)
		p := join(path, key)
		if fd == nil {
			c.fail(p, "is not a known field; known fields: "+strings.Join(jsonNames(md), ", "))
			continue
		}
		if val == nil && fd.Message() == nil || val == nil && fd.Message().FullName() != "google.protobuf.Value" {
			continue // null means "not set"
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if other, dup := oneofSet[od.FullName()]; dup {
				c.fail(p, fmt.Sprintf("cannot be set together with %s (only one of: %s)", other, strings.Join(oneofNames(od), ", ")))
				continue
			}
			oneofSet[od.FullName()] = key
		}
		switch {
		case fd.IsMap():
			c.mapField(p, val, fd)
		case fd.IsList():
			arr, ok := val.([]any)
			if !ok {
				c.fail(p, "must be an array")
				continue
			}
			for i, el := range arr {
				ep := fmt.Sprintf("%s[%d]", p, i)
				if el == nil && (fd.Message() == nil || fd.Message().FullName() != "google.protobuf.Value") {
					c.fail(ep, "must not be null")
					continue
				}
				arr[i] = c.value(ep, el, fd)
			}
		default:
			obj[key] = c.value(p, val, fd)
		}
	}
}

func (c *jsonChecker) mapField(path string, v any, fd protoreflect.FieldDescriptor) {
	obj, ok := v.(map[string]any)
	if !ok {
		c.fail(path, "must be an object")
		return
	}
	kd, vd := fd.MapKey(), fd.MapValue()
	for k, val := range obj {
		p := fmt.Sprintf("%s[%s]", path, strconv.Quote(k))
		switch kd.Kind() {
		case protoreflect.BoolKind:
			if k != "true" && k != "false" {
				c.fail(p, "key must be true or false")
				continue
			}
		case protoreflect.StringKind:
		default:
			if msg := checkInteger(json.Number(k), kd.Kind()); msg != "" {
				c.fail(p, "key "+msg)
				continue
			}
		}
		if val == nil && (vd.Message() == nil || vd.Message().FullName() != "google.protobuf.Value") {
			c.fail(p, "must not be null")
			continue
		}
		obj[k] = c.value(p, val, vd)
	}
}

// value checks one value of fd and returns it, or its replacement: the proto
// name of an enum value given by its model name.
func (c *jsonChecker) value(path string, v any, fd protoreflect.FieldDescriptor) any {
	switch k := fd.Kind(); k {
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			c.fail(path, "must be a boolean (true or false)")
		}
	case protoreflect.StringKind:
		if _, ok := v.(string); !ok {
			c.fail(path, "must be a string")
		}
	case protoreflect.BytesKind:
		s, ok := v.(string)
		if !ok || !isBase64(s) {
			c.fail(path, "must be a base64-encoded string")
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		if msg := checkFloat(v, k); msg != "" {
			c.fail(path, msg)
		}
	case protoreflect.EnumKind:
		return c.enum(path, v, fd.Enum())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		c.message(path, v, fd.Message())
	default: // integers
		if msg := checkInteger(v, k); msg != "" {
			c.fail(path, msg)
		}
	}
	return v
}

// enum checks an enum value: a model name, a proto name or a number (protojson
// takes numbers; the gateway refuses them earlier, as the schema publishes names).
func (c *jsonChecker) enum(path string, v any, ed protoreflect.EnumDescriptor) any {
	if ed.FullName() == "google.protobuf.NullValue" {
		if v != nil {
			c.fail(path, "must be null")
		}
		return v
	}
	e, err := schema.Enum(ed)
	if err != nil {
		c.fail(path, "cannot be checked: the contract's enum is unusable")
		return v
	}
	switch x := v.(type) {
	case string:
		if ev := e.Lookup(x); ev != nil {
			if string(ev.Name()) != x {
				c.renamed = true
				return string(ev.Name())
			}
			return v
		}
	case json.Number:
		if checkInteger(x, protoreflect.Int32Kind) == "" && (!ed.IsClosed() || ed.Values().ByNumber(protoreflect.EnumNumber(mustInt(x))) != nil) {
			return v
		}
	}
	c.fail(path, "must be one of: "+strings.Join(e.Names(), ", "))
	return v
}

func mustInt(n json.Number) int64 {
	i, _ := strconv.ParseInt(string(n), 10, 64)
	return i
}

var (
	durationRe = regexp.MustCompile(`^-?[0-9]+(\.[0-9]{1,9})?s$`)
	wrapperOf  = map[protoreflect.FullName]bool{
		"google.protobuf.DoubleValue": true, "google.protobuf.FloatValue": true,
		"google.protobuf.Int64Value": true, "google.protobuf.UInt64Value": true,
		"google.protobuf.Int32Value": true, "google.protobuf.UInt32Value": true,
		"google.protobuf.BoolValue": true, "google.protobuf.StringValue": true,
		"google.protobuf.BytesValue": true,
	}
)

func wellKnown(n protoreflect.FullName) bool {
	switch n {
	case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.Struct",
		"google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Empty",
		"google.protobuf.FieldMask", "google.protobuf.Any":
		return true
	}
	return wrapperOf[n]
}

func (c *jsonChecker) wellKnown(path string, v any, md protoreflect.MessageDescriptor) {
	switch n := md.FullName(); {
	case n == "google.protobuf.Timestamp":
		s, ok := v.(string)
		if _, err := time.Parse(time.RFC3339Nano, s); !ok || err != nil {
			c.fail(path, `must be an RFC 3339 timestamp such as "2024-05-01T12:00:00Z"`)
		}
	case n == "google.protobuf.Duration":
		if s, ok := v.(string); !ok || !durationRe.MatchString(s) {
			c.fail(path, `must be a duration in seconds such as "1.5s"`)
		}
	case n == "google.protobuf.Struct", n == "google.protobuf.Empty":
		obj, ok := v.(map[string]any)
		switch {
		case !ok:
			c.fail(path, "must be an object")
		case n == "google.protobuf.Empty" && len(obj) > 0:
			c.fail(path, "must be an empty object")
		}
	case n == "google.protobuf.ListValue":
		if _, ok := v.([]any); !ok {
			c.fail(path, "must be an array")
		}
	case n == "google.protobuf.FieldMask":
		if _, ok := v.(string); !ok {
			c.fail(path, `must be a comma-separated list of field paths such as "a,b.c"`)
		}
	case n == "google.protobuf.Any":
		obj, ok := v.(map[string]any)
		if !ok {
			c.fail(path, "must be an object")
			return
		}
		if t, ok := obj["@type"].(string); !ok || t == "" {
			c.fail(join(path, "@type"), "is required (a type URL such as \"type.googleapis.com/pkg.Message\")")
		}
	case wrapperOf[n]:
		c.value(path, v, md.Fields().ByName("value"))
	}
	// google.protobuf.Value accepts any JSON.
}

func isBase64(s string) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if _, err := enc.DecodeString(s); err == nil {
			return true
		}
	}
	return false
}

func checkFloat(v any, k protoreflect.Kind) string {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = string(x)
	case string:
		if x == "NaN" || x == "Infinity" || x == "-Infinity" {
			return ""
		}
		s = x
	default:
		return "must be a number"
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return "must be a number"
	}
	if k == protoreflect.FloatKind && math.Abs(f) > math.MaxFloat32 {
		return fmt.Sprintf("must be a number between %g and %g", -math.MaxFloat32, math.MaxFloat32)
	}
	return ""
}

// checkInteger accepts what protojson accepts for integer kinds: a JSON number or a
// string holding one, integral and in range.
func checkInteger(v any, k protoreflect.Kind) string {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = string(x)
	case string:
		s = x
	default:
		return "must be an integer" + rangeText(k)
	}
	f, _, err := big.ParseFloat(strings.TrimSpace(s), 10, 128, big.ToNearestEven)
	if err != nil || !f.IsInt() {
		return "must be an integer" + rangeText(k)
	}
	n, _ := f.Int(nil)
	lo, hi := intRange(k)
	if n.Cmp(lo) < 0 || n.Cmp(hi) > 0 {
		return "must be an integer" + rangeText(k)
	}
	return ""
}

func intRange(k protoreflect.Kind) (*big.Int, *big.Int) {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return big.NewInt(math.MinInt32), big.NewInt(math.MaxInt32)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return big.NewInt(0), big.NewInt(math.MaxUint32)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return big.NewInt(0), new(big.Int).SetUint64(math.MaxUint64)
	default:
		return big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)
	}
}

func rangeText(k protoreflect.Kind) string {
	lo, hi := intRange(k)
	return fmt.Sprintf(" between %s and %s", lo, hi)
}

func jsonNames(md protoreflect.MessageDescriptor) []string {
	fs := md.Fields()
	out := make([]string, 0, fs.Len())
	for i := range fs.Len() {
		out = append(out, fs.Get(i).JSONName())
	}
	return out
}

func oneofNames(od protoreflect.OneofDescriptor) []string {
	fs := od.Fields()
	out := make([]string, 0, fs.Len())
	for i := range fs.Len() {
		out = append(out, fs.Get(i).JSONName())
	}
	return out
}
