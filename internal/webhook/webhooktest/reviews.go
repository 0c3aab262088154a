// Package webhooktest builds ConversionReview bodies for the webhook's tests: realistic ones
// of a given size and the hostile shapes that drove an earlier handler's heap to tens of times
// its body. The unit tests and the end-to-end tests send the same bodies.
package webhooktest

import (
	"encoding/json"
	"strings"

	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
)

const (
	hubAPIVersion = "widgetry.io/v1"
	bodyOverhead  = 256 // the review around the objects
)

// Review is one request body and the answer it must get.
type Review struct {
	Name string
	Body []byte
	// Want is the answer: an HTTP status other than 200 ("400"), or the review's result,
	// "Success" or "Failure".
	Want string
	// WantText is part of the error message or the Failure's message.
	WantText string
}

// Of wraps elements, the objects array's contents as JSON, in a ConversionReview to desired.
func Of(uid, desired, elements string) []byte {
	return []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"` + uid +
		`","desiredAPIVersion":"` + desired + `","objects":[` + elements + `]}}`)
}

// Realistic returns a review to desired of realistic v1alpha1 Widgets, as many as fit in
// size bytes, and their number.
func Realistic(uid, desired string, size int) ([]byte, int) {
	var b strings.Builder
	b.Grow(size)
	n := 0
	for ; ; n++ {
		w, err := json.Marshal(conversiontest.RealisticWidget("ns", n))
		if err != nil {
			panic(err) // a typed object always encodes
		}
		if b.Len()+len(w)+1 > size-bodyOverhead {
			break
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(w)
	}
	return Of(uid, desired, b.String()), n
}

// repeatTo repeats unit, separated by sep, until about size bytes.
func repeatTo(unit, sep string, size int) string {
	n := max(1, size/(len(unit)+len(sep)))
	return strings.TrimSuffix(strings.Repeat(unit+sep, n), sep)
}

// Hostile returns the hostile shapes at about size bytes each, with the answer each gets.
func Hostile(size int) []Review {
	widget := func(name, extra string) string {
		return `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"` + name + `","namespace":"ns"` + extra + `},"spec":{"image":"i"}}`
	}
	of := func(elements string) []byte { return Of("hostile", hubAPIVersion, elements) }
	return []Review{
		{"an array of millions of numbers", of(repeatTo("0", ",", size)), "Failure", "object 1: not a JSON object, it is a number"},
		{"an array of empty objects", of(repeatTo("{}", ",", size)), "Failure", `object 1 (/, ): apiVersion "" kind ""`},
		{"deep nesting", of(strings.Repeat("[", size)), "400", "exceeded max depth"},
		{"deep nesting inside a Widget", of(`{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":` + strings.Repeat(`{"a":`, size/5)), "400", "exceeded max depth"},
		{"one huge string", of(widget("a", `,"annotations":{"a":"`+strings.Repeat("x", size)+`"}`)), "Success", ""},
		{"one huge key", of(widget("a", `,"annotations":{"`+strings.Repeat("k", size)+`":"v"}`)), "Success", ""},
		{"duplicate keys", of(`{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget",` + repeatTo(`"metadata":{"name":"a"}`, ",", size) + `,"spec":{"image":"i"}}`), "Success", ""},
		{"duplicate keys in spec", of(`{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{` + repeatTo(`"image":"i"`, ",", size) + `}}`), "Success", ""},
		{"non-object elements after a Widget", of(widget("a", "") + `,"s",null,` + repeatTo("[]", ",", size)), "Failure", "object 2: not a JSON object, it is a string"},
		{"truncated JSON", of(repeatTo(widget("a", ""), ",", size))[:size/2], "400", "unexpected end of JSON input"},
		{"minimal Widgets, as many as fit", of(repeatTo(`{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"}}`, ",", size)), "Success", ""},
	}
}

// Result reads the status and message of a ConversionReview answer from its first bytes
// (the result comes before the converted objects), so that a test need not keep a large
// answer whole.
func Result(head []byte) (status, message string) {
	var r struct {
		Response struct {
			Result struct{ Status, Message string }
		}
	}
	s := string(head)
	if i := strings.Index(s, `,"convertedObjects"`); i > 0 {
		s = s[:i] + "}}"
	}
	_ = json.Unmarshal([]byte(s), &r)
	return r.Response.Result.Status, r.Response.Result.Message
}
