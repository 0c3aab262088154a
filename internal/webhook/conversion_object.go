package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
)

// This file converts one object of a ConversionReview: only spec is decoded and converted
// (with internal/conversion), metadata and status pass through as raw JSON apart from the
// conversion-data annotation. The review around it is in conversion.go.

// wireObject is one Widget as the apiserver sends it, in either version.
type wireObject struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   json.RawMessage `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
	Status     json.RawMessage `json:"status"`
}

// convertObject appends raw converted to desired to buf and returns the source version label.
func convertObject(buf *bytes.Buffer, desired string, raw json.RawMessage) (string, *conversionError) {
	var obj wireObject
	if err := json.Unmarshal(raw, &obj); err != nil {
		return labelUnknown, &conversionError{reason: reasonMalformed, message: fmt.Sprintf("not a JSON object: %v", err)}
	}
	if obj.Kind != widgetKind || (obj.APIVersion != hubAPIVersion && obj.APIVersion != spokeAPIVersion) {
		return labelUnknown, &conversionError{reason: reasonUnsupportedVersion, message: fmt.Sprintf(
			"apiVersion %q kind %q is not a Widget version this webhook converts (%s, %s)", obj.APIVersion, obj.Kind, spokeAPIVersion, hubAPIVersion)}
	}
	from := versionLabel(obj.APIVersion)
	if obj.APIVersion == desired {
		// Same version: the object goes back exactly as it came.
		buf.Write(raw)
		return from, nil
	}
	var (
		spec     any
		metadata = []byte(obj.Metadata)
		err      error
	)
	if desired == hubAPIVersion {
		spec, metadata, err = specToHub(obj.Spec, metadata)
	} else {
		spec, metadata, err = specFromHub(obj.Spec, metadata)
	}
	if err != nil {
		return from, &conversionError{reason: reasonFor(err), message: err.Error()}
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return from, &conversionError{reason: reasonMalformed, message: fmt.Sprintf("encode spec: %v", err)}
	}
	buf.WriteString(`{"apiVersion":"`)
	buf.WriteString(desired)
	buf.WriteString(`","kind":"`)
	buf.WriteString(widgetKind)
	buf.WriteByte('"')
	if len(metadata) > 0 {
		buf.WriteString(`,"metadata":`)
		buf.Write(metadata)
	}
	buf.WriteString(`,"spec":`)
	buf.Write(specJSON)
	if len(obj.Status) > 0 && !bytes.Equal(obj.Status, []byte("null")) {
		// Status has the same schema in both versions (a test holds the CRD to it).
		buf.WriteString(`,"status":`)
		buf.Write(obj.Status)
	}
	buf.WriteByte('}')
	return from, nil
}

func specToHub(rawSpec, metadata []byte) (*v1.WidgetSpec, []byte, error) {
	var in v1alpha1.WidgetSpec
	if err := decodeSpec(rawSpec, &in); err != nil {
		return nil, nil, err
	}
	var data conversion.RestoreData
	if mayHoldRestoreData(metadata) {
		annotations, err := metadataAnnotations(metadata)
		if err != nil {
			return nil, nil, err
		}
		if data, err = conversion.RestoreDataFrom(annotations); err != nil {
			return nil, nil, errInvalidData{err}
		}
		if metadata, err = setMetadataAnnotations(metadata, conversion.WithRestoreData(annotations, conversion.RestoreData{})); err != nil {
			return nil, nil, err
		}
	}
	var out v1.WidgetSpec
	if err := conversion.SpecToHub(&in, data, &out); err != nil {
		return nil, nil, err
	}
	return &out, metadata, nil
}

func specFromHub(rawSpec, metadata []byte) (*v1alpha1.WidgetSpec, []byte, error) {
	var in v1.WidgetSpec
	if err := decodeSpec(rawSpec, &in); err != nil {
		return nil, nil, err
	}
	var out v1alpha1.WidgetSpec
	data, err := conversion.SpecFromHub(&in, &out)
	if err != nil {
		return nil, nil, err
	}
	if !data.IsZero() || mayHoldRestoreData(metadata) {
		annotations, err := metadataAnnotations(metadata)
		if err != nil {
			return nil, nil, err
		}
		if metadata, err = setMetadataAnnotations(metadata, conversion.WithRestoreData(annotations, data)); err != nil {
			return nil, nil, err
		}
	}
	return &out, metadata, nil
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

// mayHoldRestoreData is a cheap test that lets objects without the annotation skip decoding
// their metadata: the annotation key cannot be present unless its bytes are.
func mayHoldRestoreData(metadata []byte) bool {
	return bytes.Contains(metadata, []byte(conversion.DataAnnotation))
}

func metadataAnnotations(metadata []byte) (map[string]string, error) {
	if len(metadata) == 0 {
		return nil, nil
	}
	var m struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(metadata, &m); err != nil {
		return nil, errMalformed{fmt.Errorf("metadata: %w", err)}
	}
	return m.Annotations, nil
}

// setMetadataAnnotations replaces metadata.annotations and leaves every other metadata field
// as it came.
func setMetadataAnnotations(metadata []byte, annotations map[string]string) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &fields); err != nil {
			return nil, errMalformed{fmt.Errorf("metadata: %w", err)}
		}
	}
	if len(annotations) == 0 {
		delete(fields, "annotations")
	} else {
		b, err := json.Marshal(annotations)
		if err != nil {
			return nil, err
		}
		fields["annotations"] = b
	}
	return json.Marshal(fields)
}

type errMalformed struct{ error }

func (e errMalformed) Unwrap() error { return e.error }

type errInvalidData struct{ error }

func (e errInvalidData) Unwrap() error { return e.error }
