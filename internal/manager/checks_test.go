package manager

import (
	"net/http/httptest"
	"testing"
)

// TestConversionSelfTest: this build passes its own conversion round trips, so its readiness
// does not wait on anything outside the process. (A lossy build failing them is shown in
// internal/upgrade's TestProbeBuildConversion, with the same probe.)
func TestConversionSelfTest(t *testing.T) {
	if err := conversionSelfTest(httptest.NewRequest("GET", "/readyz", nil)); err != nil {
		t.Fatal(err)
	}
}
