package conversion

import (
	"encoding/json"
	"fmt"
)

// DataAnnotation holds, on a spoke object, the hub fields the spoke cannot represent.
const DataAnnotation = "widgetry.io/conversion-data"

// DegradedAnnotation marks a Widget the conversion webhook converted without data it could not
// use (a conversion-data annotation that does not parse, written past admission), naming the
// reason: the object was read, not refused, so that one object cannot fail a whole LIST, and
// this says that its v1-only fields were not restored. A repair removes it.
const DegradedAnnotation = "widgetry.io/conversion-degraded"

// RestoreData is what the annotation carries: hub fragments the spoke cannot hold.
// Its zero value means there is nothing to restore.
type RestoreData struct {
	// Timeout is the hub's exact duration string when whole seconds cannot express it.
	Timeout *string `json:"timeout,omitempty"`
	// Paused is the hub's spec.paused, when it is set (an explicit false included).
	Paused *bool `json:"paused,omitempty"`
	// EndpointOrder is the hub's EndpointOrderAnnotation, verbatim, when it is not exactly
	// the order of the spoke's list (which restores it by itself).
	EndpointOrder *string `json:"endpointOrder,omitempty"`
}

// IsZero reports whether the data holds nothing, so the annotation can be dropped.
func (d RestoreData) IsZero() bool {
	return d.Timeout == nil && d.Paused == nil && d.EndpointOrder == nil
}

// ParseRestoreData reads the annotation's value. A value that is not the JSON this package
// writes is an error rather than ignored: ignoring it would silently drop a paused flag.
func ParseRestoreData(value string) (RestoreData, error) {
	var d RestoreData
	if err := json.Unmarshal([]byte(value), &d); err != nil {
		return RestoreData{}, fmt.Errorf("annotation %s is not valid conversion data (%w); remove it or restore the value this operator wrote", DataAnnotation, err)
	}
	return d, nil
}

// RestoreDataFrom returns the data in annotations (nil map or missing key: the zero value).
func RestoreDataFrom(annotations map[string]string) (RestoreData, error) {
	value, ok := annotations[DataAnnotation]
	if !ok {
		return RestoreData{}, nil
	}
	return ParseRestoreData(value)
}

// Marshal encodes the data as the annotation's value.
func (d RestoreData) Marshal() string {
	b, err := json.Marshal(d)
	if err != nil {
		// RestoreData holds string pointers and a bool; encoding cannot fail.
		panic(fmt.Sprintf("marshal conversion data: %v", err))
	}
	return string(b)
}

// WithRestoreData returns annotations with the data annotation set to d, or removed when d is
// zero. The input map is not modified; a map left empty by the removal becomes nil so that an
// object that had no annotations gets none back.
func WithRestoreData(annotations map[string]string, d RestoreData) map[string]string {
	_, had := annotations[DataAnnotation]
	if d.IsZero() && !had {
		return annotations
	}
	out := make(map[string]string, len(annotations)+1)
	for k, v := range annotations {
		out[k] = v
	}
	if d.IsZero() {
		delete(out, DataAnnotation)
		if len(out) == 0 {
			return nil
		}
		return out
	}
	out[DataAnnotation] = d.Marshal()
	return out
}
