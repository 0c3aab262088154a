// Package schemagen draws JSON values from a CRD version's structural schema, so that a round
// trip can be shown total over what the apiserver admits instead of over a domain written by
// hand. It follows types, formats, enums, minimum and maximum (and format int32's range),
// lengths, patterns, item and property counts, list-type map keys and sets, and the regular
// expressions of x-kubernetes-validations rules (self.matches(...), and k.matches(...) for the
// keys of a map). The rest of a CEL rule it does not read: a caller validates each value with
// the apiserver's own validators and draws again when one is refused (see Valid).
//
// A quarter of the values are drawn at the bounds: longest strings, largest and smallest
// integers, fullest and empty lists and maps. Bounds counts which bounds were reached, per
// schema path, so that a test can require that every one was.
package schemagen

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"regexp"
	"regexp/syntax"
	"sort"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Generator draws values. It is not safe for concurrent use.
type Generator struct {
	r *rand.Rand
	// Bounds counts the values drawn at a bound, by "path bound" (for example
	// ".spec.image maxLength", ".spec.size minimum", ".spec.endpoints maxItems").
	Bounds map[string]int
	// Required lists every bound the schemas drawn from have, as keys of Bounds.
	Required map[string]bool
	// Drawn and Refused count the objects Object returned and the draws the apiserver's
	// validators refused on the way (a generator that drifts from the schema shows here);
	// LastRefusal says why the last one was.
	Drawn, Refused int
	LastRefusal    error
	atBound        bool
	pending        []string
	patterns       map[string]*syntax.Regexp
}

// New returns a Generator seeded with seed.
func New(seed int64) *Generator {
	return &Generator{r: rand.New(rand.NewSource(seed)), //nolint:gosec // test data, reproducible from the seed
		Bounds: map[string]int{}, Required: map[string]bool{}, patterns: map[string]*syntax.Regexp{}}
}

// Draw draws one value of s; path names s's place in the object for Bounds.
func (g *Generator) Draw(s *apiextensionsv1.JSONSchemaProps, path string) (any, error) {
	g.atBound = g.r.Intn(4) == 0
	return g.value(s, path)
}

// Missing lists the bounds of the schemas drawn from that no value reached.
func (g *Generator) Missing() []string {
	var out []string
	for b := range g.Required {
		if g.Bounds[b] == 0 {
			out = append(out, b)
		}
	}
	sort.Strings(out)
	return out
}

// offBounds draws off the bounds until the returned func runs, when full.
func (g *Generator) offBounds(full bool) func() {
	was := g.atBound
	if full {
		g.atBound = false
	}
	return func() { g.atBound = was }
}

// bound says whether this value is drawn at a bound: half the values of an object drawn at
// its bounds, so that the bounds of one object meet in every combination over many draws.
func (g *Generator) bound() bool { return g.atBound && g.r.Intn(2) == 0 }

// note records a bound of path and whether the value drawn reached it; the hits count in
// Bounds only once the object holding them is admitted (keep).
func (g *Generator) note(path, bound string, hit bool) {
	g.Required[path+" "+bound] = true
	if hit {
		g.pending = append(g.pending, path+" "+bound)
	}
}

// keep counts the bounds the admitted object reached; drop forgets a refused one's.
func (g *Generator) keep() {
	for _, b := range g.pending {
		g.Bounds[b]++
	}
	g.pending = g.pending[:0]
}

func (g *Generator) drop() { g.pending = g.pending[:0] }

func (g *Generator) value(s *apiextensionsv1.JSONSchemaProps, path string) (any, error) {
	if len(s.Enum) > 0 {
		var v any
		err := json.Unmarshal(s.Enum[g.r.Intn(len(s.Enum))].Raw, &v)
		return v, err
	}
	switch s.Type {
	case "object":
		return g.object(s, path)
	case "array":
		return g.array(s, path)
	case "string":
		return g.str(s, path)
	case "integer":
		return g.integer(s, path), nil
	case "boolean":
		return g.r.Intn(2) == 0, nil
	case "number":
		return g.r.NormFloat64() * 1e6, nil
	}
	return nil, fmt.Errorf("schemagen: %s: type %q is not drawn", path, s.Type)
}

func (g *Generator) object(s *apiextensionsv1.JSONSchemaProps, path string) (any, error) {
	out := map[string]any{}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		hi := 8
		if s.MaxProperties != nil {
			hi = int(*s.MaxProperties)
		}
		n := g.r.Intn(min(hi, 8) + 1)
		if g.bound() {
			n = []int{0, hi}[g.r.Intn(2)]
		}
		keys, err := g.keyPattern(s)
		if err != nil {
			return nil, fmt.Errorf("schemagen: %s: %w", path, err)
		}
		keyMax := keyLimit(s)
		defer g.offBounds(n == hi)()
		for tries := 0; len(out) < n && tries < 20*n; tries++ {
			k := g.key(keys, keyMax)
			if keyMax > 0 {
				g.note(path+"{}", "key maxLength", len([]rune(k)) == keyMax)
			}
			if _, dup := out[k]; dup {
				continue
			}
			v, err := g.value(s.AdditionalProperties.Schema, path+"{}")
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		g.note(path, "empty", len(out) == 0)
		if s.MaxProperties != nil {
			g.note(path, "maxProperties", len(out) == hi)
		}
		return out, nil
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !required[name] && g.r.Intn(3) == 0 {
			continue
		}
		p := s.Properties[name]
		v, err := g.value(&p, path+"."+name)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

func (g *Generator) array(s *apiextensionsv1.JSONSchemaProps, path string) (any, error) {
	hi := 8
	if s.MaxItems != nil {
		hi = int(*s.MaxItems)
	}
	n := g.r.Intn(min(hi, 8) + 1)
	if g.bound() {
		n = []int{0, hi}[g.r.Intn(2)]
	}
	out := []any{}
	seen := map[string]bool{}
	// A full list draws its items off their bounds: rules across items (unique ports, say)
	// would refuse a list of many values at the same bound.
	defer g.offBounds(n == hi)()
	for tries := 0; len(out) < n && tries < 20*n; tries++ {
		v, err := g.value(s.Items.Schema, path+"[]")
		if err != nil {
			return nil, err
		}
		// A list-type map's keys and a set's items are unique: the schema refuses repeats.
		id := v
		if s.XListType != nil && *s.XListType == "map" {
			m, _ := v.(map[string]any)
			key := []any{}
			for _, k := range s.XListMapKeys {
				key = append(key, m[k])
			}
			id = key
		}
		if s.XListType != nil && *s.XListType != "atomic" {
			b, _ := json.Marshal(id)
			if seen[string(b)] {
				continue
			}
			seen[string(b)] = true
		}
		out = append(out, v)
	}
	g.note(path, "empty", len(out) == 0)
	if s.MaxItems != nil {
		g.note(path, "maxItems", len(out) == hi)
	}
	return out, nil
}

func (g *Generator) str(s *apiextensionsv1.JSONSchemaProps, path string) (any, error) {
	if s.Format == "date-time" {
		// Whole seconds: metav1.Time, the type every date-time of this API decodes into,
		// keeps no more (the schema admits more; those are not stored by our clients).
		t := time.Unix(g.r.Int63n(4102444800), 0).UTC()
		return t.Format(time.RFC3339), nil
	}
	lo, hi := 0, 64
	if s.MinLength != nil {
		lo = int(*s.MinLength)
	}
	if s.MaxLength != nil {
		hi = int(*s.MaxLength)
	}
	atBound := g.bound()
	var out []rune
	pattern := s.Pattern
	if pattern == "" {
		pattern = selfPattern(s)
	}
	if pattern != "" {
		re, err := g.compile(pattern)
		if err != nil {
			return nil, fmt.Errorf("schemagen: %s: pattern: %w", path, err)
		}
		for tries := 0; tries < 100; tries++ {
			out = matching{r: g.r, fill: atBound}.draw(re, hi)
			if len(out) >= lo {
				break
			}
		}
	} else {
		n := lo + g.r.Intn(min(hi, 32)-lo+1)
		if atBound {
			n = []int{lo, hi}[g.r.Intn(2)]
		}
		out = make([]rune, n)
		for i := range out {
			out[i] = anyRune(g.r)
		}
	}
	if s.MaxLength != nil {
		g.note(path, "maxLength", len(out) == hi)
	}
	return string(out), nil
}

// anyRune draws ASCII, other scripts, emoji, combining marks and the characters JSON must
// escape.
func anyRune(r *rand.Rand) rune {
	pools := []string{"abcxyz019 -_./:", "\"\\\n\t\u2028<>&", "ÄßçЖжΩ中文日本語한국어", "😀🚀👍🏽", "\u0301\u200d\ufeff"}
	p := []rune(pools[r.Intn(len(pools))])
	return p[r.Intn(len(p))]
}

func (g *Generator) integer(s *apiextensionsv1.JSONSchemaProps, path string) int64 {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if s.Format == "int32" {
		lo, hi = math.MinInt32, math.MaxInt32
	}
	// A JSON number keeps 53 bits exactly in every decoder, so the schema's float bounds
	// are converted with care at the edges.
	if s.Minimum != nil {
		lo = max(lo, int64(math.Ceil(*s.Minimum)))
		if s.ExclusiveMinimum && float64(lo) == *s.Minimum {
			lo++
		}
	}
	if s.Maximum != nil && *s.Maximum < float64(math.MaxInt64) {
		hi = min(hi, int64(math.Floor(*s.Maximum)))
		if s.ExclusiveMaximum && float64(hi) == *s.Maximum {
			hi--
		}
	}
	var v int64
	switch {
	case g.bound():
		v = []int64{lo, hi}[g.r.Intn(2)]
	case g.r.Intn(2) == 0 && lo <= 0 && hi >= 100:
		v = g.r.Int63n(101)
	default:
		span := uint64(hi - lo)
		if span == math.MaxUint64 {
			v = int64(g.r.Uint64())
		} else {
			v = lo + int64(g.r.Uint64()%(span+1))
		}
	}
	g.note(path, "minimum", v == lo)
	g.note(path, "maximum", v == hi)
	return v
}

func (g *Generator) compile(pattern string) (*syntax.Regexp, error) {
	if re, ok := g.patterns[pattern]; ok {
		return re, nil
	}
	re, err := compile(pattern)
	if err != nil {
		return nil, err
	}
	g.patterns[pattern] = re
	return re, nil
}

// matchesCall finds the regular expressions a CEL rule matches a value against, and which
// value: "self" for the value itself, another name for a map's keys (self.all(k, ...)).
// A call negated with ! is skipped: its expression describes what is refused.
var matchesCall = regexp.MustCompile(`(!?)\b(\w+)\.matches\('((?:[^'\\]|\\.)*)'\)`)

func celPatterns(s *apiextensionsv1.JSONSchemaProps, self bool) []string {
	var out []string
	for _, rule := range s.XValidations {
		for _, m := range matchesCall.FindAllStringSubmatch(rule.Rule, -1) {
			if m[1] == "!" || (m[2] == "self") != self {
				continue
			}
			out = append(out, strings.NewReplacer(`\\`, `\`, `\'`, `'`).Replace(m[3]))
		}
	}
	return out
}

// durationText is what CEL's duration() parses (Go's time.ParseDuration): the pattern drawn
// from for a string its rules read as a duration.
// Leading zeros let a duration reach any length limit while its value stays in range.
const durationText = `^(?:0*[0-9]{1,4}(?:[.][0-9]{1,3})?(?:h|m|s|ms|us|µs|ns)){1,3}$`

func selfPattern(s *apiextensionsv1.JSONSchemaProps) string {
	if p := celPatterns(s, true); len(p) > 0 {
		return p[0]
	}
	for _, rule := range s.XValidations {
		if strings.Contains(rule.Rule, "duration(self)") {
			return durationText
		}
	}
	return ""
}

func (g *Generator) keyPattern(s *apiextensionsv1.JSONSchemaProps) (*syntax.Regexp, error) {
	p := celPatterns(s, false)
	if len(p) == 0 {
		return nil, nil
	}
	return g.compile(p[0])
}

// sizeCall finds a length limit a CEL rule puts on a map's keys: size(k) <= N.
var sizeCall = regexp.MustCompile(`\bsize\((\w+)\)\s*<=\s*(\d+)`)

// keyLimit is the longest key the rules of a map admit, 0 when they name none.
func keyLimit(s *apiextensionsv1.JSONSchemaProps) int {
	for _, rule := range s.XValidations {
		for _, m := range sizeCall.FindAllStringSubmatch(rule.Rule, -1) {
			if m[1] != "self" {
				n, err := strconv.Atoi(m[2])
				if err != nil {
					return 0 // too large for an int: no limit worth drawing to
				}
				return n
			}
		}
	}
	return 0
}

// key draws a map key: from the rules' pattern for keys, else any string (unicode included);
// at a bound, as long as the rules admit.
func (g *Generator) key(re *syntax.Regexp, limit int) string {
	if re != nil {
		budget, fill := 1+g.r.Intn(12), false
		if limit > 0 && g.bound() {
			budget, fill = limit, true
		} else if limit > 0 {
			budget = min(budget, limit)
		}
		return string(matching{r: g.r, fill: fill}.draw(re, budget))
	}
	out := make([]rune, 1+g.r.Intn(12))
	for i := range out {
		out[i] = anyRune(g.r)
	}
	return string(out)
}
