package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
)

// This file converts one object of a ConversionReview: only spec is decoded and converted
// (with internal/conversion), metadata and status pass through as raw JSON apart from the
// conversion-data annotation. The review around it is in conversion.go.

// wireObject is one Widget as the apiserver sends it, in either version: spans of the
// review's bytes, not copies.
type wireObject struct {
	apiVersion []byte // unquoted
	kind       []byte
	metadata   []byte
	spec       []byte
	status     []byte
}

// splitObject finds the members of one object. raw is valid JSON (the review's decoder
// checked it); anything but an object is refused.
func splitObject(raw []byte) (wireObject, *conversionError) {
	var obj wireObject
	var bad []byte
	err := eachMember(raw, func(m member) bool {
		switch string(m.key) {
		case `"apiVersion"`:
			if obj.apiVersion = jsonStringBytes(m.value); obj.apiVersion == nil {
				bad = m.key
			}
		case `"kind"`:
			if obj.kind = jsonStringBytes(m.value); obj.kind == nil {
				bad = m.key
			}
		case `"metadata"`:
			obj.metadata = m.value
		case `"spec"`:
			obj.spec = m.value
		case `"status"`:
			obj.status = m.value
		}
		return true
	})
	switch {
	case err != nil:
		return obj, &conversionError{reason: reasonMalformed, message: fmt.Sprintf("%s, but %s", err, jsonKind(raw))}
	case bad != nil:
		return obj, &conversionError{reason: reasonMalformed, message: fmt.Sprintf("%s is not a string", bad)}
	}
	return obj, nil
}

// objectWriter is one batch's output and the scratch its conversions reuse: converting an
// object allocates only what its own spec needs, which keeps the garbage of a review of many
// small objects small.
type objectWriter struct {
	bytes.Buffer
	enc       *json.Encoder
	hubSpec   v1.WidgetSpec
	spokeSpec v1alpha1.WidgetSpec
	// endpoints is the map hubSpec decodes into, cleared for each object.
	endpoints map[string]v1.EndpointSpec
	// splice holds a rewritten metadata until the object is written.
	splice spliceBuffers
	// degraded is why the last object was converted without data it could not use ("": it
	// was not); the converter counts and logs it.
	degraded string
}

// spliceBuffers are what rewriting an object's metadata writes into, reused from object to
// object: the metadata goes into the output before the next object is converted.
type spliceBuffers struct {
	annotations, metadata []byte
}

func newObjectWriter(size int) *objectWriter {
	w := &objectWriter{}
	w.Grow(size)
	w.enc = json.NewEncoder(&w.Buffer)
	return w
}

// convertObject appends raw converted to desired to buf and returns the source version label.
func convertObject(buf *objectWriter, desired string, raw []byte) (string, *conversionError) {
	obj, convErr := splitObject(raw)
	if convErr != nil {
		return labelUnknown, convErr
	}
	// Compared as bytes: a string conversion in a comparison allocates nothing.
	apiVersion := string(obj.apiVersion)
	if string(obj.kind) != widgetKind || (apiVersion != hubAPIVersion && apiVersion != spokeAPIVersion) {
		return labelUnknown, &conversionError{reason: reasonUnsupportedVersion, message: fmt.Sprintf(
			"apiVersion %q kind %q is not a Widget version this webhook converts (%s, %s)", obj.apiVersion, obj.kind, spokeAPIVersion, hubAPIVersion)}
	}
	out := &buf.Buffer // a bytes.Buffer's writes cannot fail
	from := versionLabel(apiVersion)
	if apiVersion == desired {
		// Same version: the object goes back exactly as it came.
		out.Write(raw)
		return from, nil
	}
	var (
		spec     any
		metadata = obj.metadata
		err      error
	)
	if desired == hubAPIVersion {
		spec, metadata, err = specToHub(obj.spec, metadata, buf)
	} else {
		spec, metadata, err = specFromHub(obj.spec, metadata, buf)
	}
	if err != nil {
		return from, &conversionError{reason: reasonFor(err), message: err.Error()}
	}
	out.WriteString(`{"apiVersion":"`)
	out.WriteString(desired)
	out.WriteString(`","kind":"`)
	out.WriteString(widgetKind)
	out.WriteByte('"')
	if len(metadata) > 0 {
		out.WriteString(`,"metadata":`)
		out.Write(metadata)
	}
	out.WriteString(`,"spec":`)
	// Encoded straight into the response; the spec is small and typed, so it cannot fail.
	if err := buf.enc.Encode(spec); err != nil {
		return from, &conversionError{reason: reasonMalformed, message: fmt.Sprintf("encode spec: %v", err)}
	}
	buf.Truncate(buf.Len() - 1) // the Encoder's newline
	if len(obj.status) > 0 && !bytes.Equal(obj.status, []byte("null")) {
		// Status has the same schema in both versions (a test holds the CRD to it).
		out.WriteString(`,"status":`)
		out.Write(obj.status)
	}
	out.WriteByte('}')
	return from, nil
}

// jsonKind names what a JSON value is, for messages about a value that should be an object.
func jsonKind(raw []byte) string {
	i := skipSpace(raw, 0)
	if i >= len(raw) {
		return "it is empty"
	}
	switch raw[i] {
	case '{':
		return "it is a malformed object"
	case '[':
		return "it is an array"
	case '"':
		return "it is a string"
	case 't', 'f':
		return "it is a boolean"
	case 'n':
		return "it is null"
	}
	return "it is a number"
}

// specToHub converts a v1alpha1 spec into scratch.hubSpec, using scratch.spokeSpec for the
// input, and returns it with the metadata it goes with.
func specToHub(rawSpec, metadata []byte, scratch *objectWriter) (*v1.WidgetSpec, []byte, error) {
	in, out := &scratch.spokeSpec, &scratch.hubSpec
	*in, *out = v1alpha1.WidgetSpec{}, v1.WidgetSpec{}
	if err := decodeSpec(rawSpec, in); err != nil {
		return nil, nil, err
	}
	var (
		data  conversion.RestoreData
		edits [2]annotationEdit
		n     int
	)
	if mayHold(metadata, dataKeyPart) {
		value, err := annotationValue(metadata, conversion.DataAnnotation)
		if err != nil {
			return nil, nil, err
		}
		if value != nil {
			if data, err = conversion.ParseRestoreData(*value); err != nil {
				// Failing here would fail the whole review: every LIST and watch through v1,
				// the controller's and the garbage collector's among them, for one object
				// whose annotation was written past admission. Convert what the spoke holds
				// (data zero: not paused, the timeout in whole seconds), keep the annotation
				// as it came, so nothing is lost, and mark the object so that a reader sees it.
				scratch.degraded = err.Error()
				mark := fmt.Sprintf("%s: %v; converted without it (spec.paused false, spec.timeout in whole seconds); see runbooks/alerts/WidgetConversionDegraded.md",
					reasonInvalidData, err)
				edits[n], n = annotationEdit{conversion.DegradedAnnotation, &mark}, n+1
				data = conversion.RestoreData{}
			} else {
				// The hub holds the data in its spec and metadata: the annotation goes.
				edits[n], n = annotationEdit{conversion.DataAnnotation, nil}, n+1
			}
		}
	}
	// The list's order, which the map cannot hold.
	if order, set := conversion.HubEndpointOrder(in.Endpoints, data); set {
		edits[n], n = annotationEdit{conversion.EndpointOrderAnnotation, &order}, n+1
	} else if mayHold(metadata, orderKeyPart) {
		edits[n], n = annotationEdit{conversion.EndpointOrderAnnotation, nil}, n+1
	}
	if n > 0 {
		var err error
		if metadata, err = setAnnotations(metadata, &scratch.splice, edits[:n]...); err != nil {
			return nil, nil, err
		}
	}
	if err := conversion.SpecToHub(in, data, out); err != nil {
		return nil, nil, err
	}
	return out, metadata, nil
}

// specFromHub is specToHub the other way.
func specFromHub(rawSpec, metadata []byte, scratch *objectWriter) (*v1alpha1.WidgetSpec, []byte, error) {
	in, out := &scratch.hubSpec, &scratch.spokeSpec
	// The endpoints decode into the map of the object before, cleared: json.Unmarshal fills a
	// map it is given, which spares a new map and its growth for every object.
	if scratch.endpoints == nil {
		scratch.endpoints = map[string]v1.EndpointSpec{}
	}
	clear(scratch.endpoints)
	*in, *out = v1.WidgetSpec{Endpoints: scratch.endpoints}, v1alpha1.WidgetSpec{}
	if err := decodeSpec(rawSpec, in); err != nil {
		return nil, nil, err
	}
	if len(in.Endpoints) == 0 && in.Endpoints != nil {
		// The map given is still there: the spec's endpoints are {} or absent, which the
		// conversion must tell apart (an empty map is kept as an empty list, an absent one
		// stays absent). (null sets the map to nil itself.)
		if raw, err := memberValue(rawSpec, `"endpoints"`); err != nil || raw == nil {
			in.Endpoints = nil
		}
	}
	data, err := conversion.SpecFromHub(in, out)
	if err != nil {
		return nil, nil, err
	}
	var (
		edits [2]annotationEdit
		n     int
	)
	if mayHold(metadata, orderKeyPart) {
		order, err := annotationValue(metadata, conversion.EndpointOrderAnnotation)
		if err != nil {
			return nil, nil, err
		}
		if order != nil {
			conversion.RestoreEndpointOrder(out.Endpoints, *order, true, &data)
			edits[n], n = annotationEdit{conversion.EndpointOrderAnnotation, nil}, n+1
		}
	}
	// Metadata is rewritten only when the annotation must be written, or a stale one removed.
	if !data.IsZero() {
		value := data.Marshal()
		edits[n], n = annotationEdit{conversion.DataAnnotation, &value}, n+1
	} else if mayHold(metadata, dataKeyPart) {
		stale, err := annotationValue(metadata, conversion.DataAnnotation)
		if err != nil {
			return nil, nil, err
		}
		if stale != nil {
			edits[n], n = annotationEdit{conversion.DataAnnotation, nil}, n+1
		}
	}
	if n > 0 {
		if metadata, err = setAnnotations(metadata, &scratch.splice, edits[:n]...); err != nil {
			return nil, nil, err
		}
	}
	return out, metadata, nil
}

func decodeSpec(raw []byte, into any) error {
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return errMalformed{fmt.Errorf("spec: %w", err)}
	}
	return nil
}

// mayHold is a cheap test that lets objects without an annotation skip decoding their
// metadata: the annotation's key cannot be present unless these bytes are (a part of the key
// without '/', which may be written escaped; the apiserver re-encodes what it sends, so no
// other escape reaches here).
func mayHold(metadata []byte, keyPart string) bool {
	return bytes.Contains(metadata, []byte(keyPart))
}

// Parts of the annotations' keys for mayHold.
const (
	dataKeyPart  = "conversion-data"
	orderKeyPart = "v1alpha1-endpoint-order"
)

// annotationValue returns annotation key's value, nil when there is none. Only that one value
// is decoded: the rest of metadata (managedFields above all) and the other annotations are
// skipped.
func annotationValue(metadata []byte, key string) (*string, error) {
	annotations, err := annotationsOf(metadata)
	if err != nil || annotations == nil {
		return nil, err
	}
	if hasEscapes(annotations) {
		var m map[string]string
		if err := json.Unmarshal(annotations, &m); err != nil {
			return nil, errMalformed{fmt.Errorf("metadata.annotations: %w", err)}
		}
		if v, ok := m[key]; ok {
			return &v, nil
		}
		return nil, nil
	}
	raw, err := memberValue(annotations, strconv.Quote(key))
	if err != nil {
		return nil, errMalformed{fmt.Errorf("metadata.annotations: %w", err)}
	}
	if raw == nil {
		return nil, nil
	}
	v, ok := jsonString(raw)
	if !ok {
		return nil, errMalformed{fmt.Errorf("metadata.annotations[%s] is not a string", key)}
	}
	return &v, nil
}

// annotationEdit sets annotation key to value, or removes it when value is nil.
type annotationEdit struct {
	key   string
	value *string
}

// setAnnotations applies edits to metadata.annotations (removing annotations when none is
// left, so an object that had none gets none back). It splices: every other annotation and
// metadata member stays the bytes it came as, in its place; set annotations go last, in the
// order of edits. The result is in bufs.metadata, valid until the next call with bufs.
func setAnnotations(metadata []byte, bufs *spliceBuffers, edits ...annotationEdit) ([]byte, error) {
	annotations, err := annotationsOf(metadata)
	if err != nil {
		return nil, err
	}
	if hasEscapes(annotations) {
		// A key written with escapes could be one of edits': decode them all.
		var m map[string]string
		if err := json.Unmarshal(annotations, &m); err != nil {
			return nil, errMalformed{fmt.Errorf("metadata.annotations: %w", err)}
		}
		for _, e := range edits {
			if e.value != nil {
				m[e.key] = *e.value
			} else if _, had := m[e.key]; had {
				if delete(m, e.key); len(m) == 0 {
					m = nil
				}
			}
		}
		encoded, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		return bufs.replaceAnnotations(metadata, encoded)
	}
	out := append(bufs.annotations[:0], '{')
	defer func() { bufs.annotations = out[:0] }() // keeps what it has grown to
	add := func(member []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, member...)
	}
	edited := func(quotedKey []byte) bool {
		for _, e := range edits {
			if len(quotedKey) == len(e.key)+2 && string(quotedKey[1:len(quotedKey)-1]) == e.key {
				return true
			}
		}
		return false
	}
	if annotations != nil {
		if err := eachMember(annotations, func(m member) bool {
			if !edited(m.key) {
				add(annotations[m.start:m.end])
			}
			return true
		}); err != nil {
			return nil, errMalformed{fmt.Errorf("metadata.annotations: %w", err)}
		}
	}
	for _, e := range edits {
		if e.value == nil {
			continue
		}
		encoded, err := json.Marshal(*e.value)
		if err != nil {
			return nil, err
		}
		add(append(append([]byte(strconv.Quote(e.key)), ':'), encoded...))
	}
	if len(out) == 1 {
		return bufs.replaceAnnotations(metadata, nil)
	}
	out = append(out, '}')
	return bufs.replaceAnnotations(metadata, out)
}

// annotationsOf returns metadata.annotations as it came, nil when absent or null.
func annotationsOf(metadata []byte) ([]byte, error) {
	if len(metadata) == 0 || bytes.Equal(metadata, []byte("null")) {
		return nil, nil
	}
	raw, err := memberValue(metadata, `"annotations"`)
	if err != nil {
		return nil, errMalformed{fmt.Errorf("metadata: %w", err)}
	}
	if bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	return raw, nil
}

// hasEscapes reports whether a key of the object raw holds a JSON escape, which the byte
// comparisons of keys here cannot see through. (Values may hold any: last-applied-configuration
// is JSON in a string.)
func hasEscapes(raw []byte) bool {
	escaped := false
	_ = eachMember(raw, func(m member) bool {
		escaped = bytes.IndexByte(m.key, '\\') >= 0
		return !escaped
	})
	return escaped
}

// replaceAnnotations replaces metadata.annotations with encoded (nil: none) and leaves every
// other metadata member as the bytes it came as, in its place. The result is in b.metadata.
func (b *spliceBuffers) replaceAnnotations(metadata, encoded []byte) ([]byte, error) {
	out := slices.Grow(b.metadata[:0], len(metadata)+len(encoded)+len(`,"annotations":`)+2)
	out = append(out, '{')
	defer func() { b.metadata = out }()
	written := false
	write := func(member []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, member...)
	}
	writeAnnotations := func() {
		if !written && encoded != nil {
			write([]byte(`"annotations":`))
			out = append(out, encoded...)
		}
		written = true
	}
	if len(metadata) > 0 && !bytes.Equal(metadata, []byte("null")) {
		err := eachMember(metadata, func(m member) bool {
			if string(m.key) == `"annotations"` {
				writeAnnotations() // in the place of the first, duplicates dropped
				return true
			}
			write(metadata[m.start:m.end])
			return true
		})
		if err != nil {
			return nil, errMalformed{fmt.Errorf("metadata: %w", err)}
		}
	}
	writeAnnotations()
	return append(out, '}'), nil
}

type errMalformed struct{ error }

func (e errMalformed) Unwrap() error { return e.error }
