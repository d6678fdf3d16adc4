package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Errors of tool references and resolution; match them with errors.Is.
var (
	// ErrBadVersion is returned for a version that is not x.y.z (or x in a reference).
	ErrBadVersion = errors.New("contract: bad version")
	// ErrBadToolRef is returned for a tool reference that cannot be parsed.
	ErrBadToolRef = errors.New("contract: bad tool reference")
	// ErrToolNotFound is returned when no version of the tool is known.
	ErrToolNotFound = errors.New("contract: unknown tool")
	// ErrVersionNotFound is returned when the tool exists but not in that version.
	ErrVersionNotFound = errors.New("contract: unknown tool version")
)

// Version is a semantic version x.y.z.
type Version struct{ Major, Minor, Patch int }

// String returns "x.y.z".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Compare returns -1, 0 or +1 as v is lower than, equal to or higher than o.
func (v Version) Compare(o Version) int {
	for _, d := range [3]int{v.Major - o.Major, v.Minor - o.Minor, v.Patch - o.Patch} {
		switch {
		case d < 0:
			return -1
		case d > 0:
			return 1
		}
	}
	return 0
}

// Bounds of versions and tool references, checked before any other work so that
// a huge or odd spelling costs nothing.
const (
	// MaxVersionPartDigits bounds each number of a version: 9 digits always fit an
	// int, so no spelling overflows.
	MaxVersionPartDigits = 9
	// MaxToolRefLen is the longest tool reference [ParseToolRef] accepts, in bytes:
	// a model-facing name has at most 64 characters, "@" and the longest version
	// (3×9 digits and two dots) add 30.
	MaxToolRefLen = 128
)

// ParseVersion parses "x.y.z" as strict semantic version core numbers: decimal
// digits only, no sign, no leading zero (0 itself is fine), at most
// [MaxVersionPartDigits] digits each, no "v" prefix, no pre-release or build
// suffix. So every version has exactly one spelling: "1.0.0", never "1.00.0".
func ParseVersion(s string) (Version, error) {
	if len(s) > 3*MaxVersionPartDigits+2 {
		return Version{}, fmt.Errorf("%w: longer than x.y.z allows", ErrBadVersion)
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("%w: %q is not x.y.z", ErrBadVersion, s)
	}
	var n [3]int
	for i, p := range parts {
		if !versionPart(p) {
			return Version{}, fmt.Errorf("%w: %q is not x.y.z (decimal numbers without sign or leading zeros)", ErrBadVersion, s)
		}
		n[i], _ = strconv.Atoi(p) // cannot fail: at most 9 digits
	}
	return Version{n[0], n[1], n[2]}, nil
}

// versionPart reports whether p is a semver number: "0" or 1-9 followed by digits.
func versionPart(p string) bool {
	if p == "" || len(p) > MaxVersionPartDigits || (p[0] == '0' && len(p) > 1) {
		return false
	}
	for i := range len(p) {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// ToolRef is a parsed tool reference.
type ToolRef struct {
	Toolkit, Tool string
	// Version is the exact version asked for; "" asks for the latest served.
	Version string
}

// String returns the canonical form "Toolkit.Tool[@x.y.z]".
func (r ToolRef) String() string {
	if r.Version == "" {
		return r.Toolkit + "." + r.Tool
	}
	return ID(r.Toolkit, r.Tool, r.Version)
}

// ErrToolRefTooLong is returned for a tool reference longer than [MaxToolRefLen].
var ErrToolRefTooLong = fmt.Errorf("%w: longer than %d bytes", ErrBadToolRef, MaxToolRefLen)

// ParseToolRef parses "Toolkit.Tool@x.y.z", "Toolkit.Tool@x" (= x.0.0),
// "Toolkit.Tool" (latest) and model names "Toolkit_Tool" (optionally with a
// version). Versions are strict (see [ParseVersion]). A reference longer than
// [MaxToolRefLen] fails with [ErrToolRefTooLong] before anything else, and that
// error does not quote it. [ToolRef.String] of the result is the one canonical
// spelling of every reference that means the same.
func ParseToolRef(s string) (ToolRef, error) {
	if len(s) > MaxToolRefLen {
		return ToolRef{}, ErrToolRefTooLong
	}
	name, version, hasVersion := strings.Cut(s, "@")
	var ref ToolRef
	if tk, tool, ok := strings.Cut(name, "."); ok {
		ref.Toolkit, ref.Tool = tk, tool
	} else if tk, tool, ok := SplitModelName(name); ok {
		ref.Toolkit, ref.Tool = tk, tool
	}
	if ref.Toolkit == "" || ref.Tool == "" || !toolkitNameRe.MatchString(ref.Toolkit) || !toolNameRe.MatchString(ref.Tool) {
		return ToolRef{}, fmt.Errorf("%w: %q (want Toolkit.Tool[@x.y.z] or Toolkit_Tool)", ErrBadToolRef, s)
	}
	if hasVersion {
		if !strings.Contains(version, ".") {
			version += ".0.0"
		}
		v, err := ParseVersion(version)
		if err != nil {
			return ToolRef{}, fmt.Errorf("%w: %q: %w", ErrBadToolRef, s, err)
		}
		ref.Version = v.String()
	}
	return ref, nil
}

// Resolve picks the definition ref asks for among defs: the exact version, or the
// highest version when ref has none.
func Resolve(ref ToolRef, defs []*toolfleetv1.ToolDefinition) (*toolfleetv1.ToolDefinition, error) {
	var best *toolfleetv1.ToolDefinition
	var bestV Version
	for _, d := range defs {
		if d.GetToolkit() != ref.Toolkit || d.GetName() != ref.Tool {
			continue
		}
		v, err := ParseVersion(d.GetVersion())
		if err != nil {
			continue
		}
		if ref.Version != "" {
			if v.String() == ref.Version {
				return d, nil
			}
			if best == nil {
				best = d // remember that the tool exists
			}
			continue
		}
		if best == nil || v.Compare(bestV) > 0 {
			best, bestV = d, v
		}
	}
	switch {
	case best == nil:
		return nil, fmt.Errorf("%w: %s", ErrToolNotFound, ref)
	case ref.Version != "":
		return nil, fmt.Errorf("%w: %s", ErrVersionNotFound, ref)
	}
	return best, nil
}
