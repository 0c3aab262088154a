package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kjson "sigs.k8s.io/json"

	"github.com/widgetry/widget-operator/internal/conversion/conversiontest"
)

// FuzzConvertReview feeds raw request bodies to the handler: it never panics, and every
// successful answer carries the request's uid and exactly one object per input object.
// make test-conversion runs it for a minute; make test runs the seed corpus.
func FuzzConvertReview(f *testing.F) {
	f.Add(reviewBody(f, "u1", "widgetry.io/v1", conversiontest.RealisticWidget("ns", 1)))
	f.Add(reviewBody(f, "u2", "widgetry.io/v1alpha1", `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i","timeout":"1.5s","paused":true,"endpoints":{"b":{"port":2},"a":{"port":1}}}}`))
	f.Add(reviewBody(f, "u3", "widgetry.io/v1", `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"annotations":{"widgetry.io/conversion-data":"{\"timeout\":\"90s\"}"}},"spec":{"timeoutSeconds":90,"endpoints":[]}}`))
	f.Add([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x","desiredAPIVersion":"widgetry.io/v1","objects":[1,null,"s"]}}`))
	f.Add([]byte(`{}`))
	h := &ConversionHandler{MaxBodyBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/convert", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return
		}
		var got struct {
			Response struct {
				UID              string            `json:"uid"`
				ConvertedObjects []json.RawMessage `json:"convertedObjects"`
				Result           struct{ Status string }
			}
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("response is not JSON: %v\n%s", err, rec.Body.Bytes())
		}
		var sent apiextensionsv1.ConversionReview
		// Keys are matched as the apiserver matches them: case-sensitively.
		if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &sent); err != nil || sent.Request == nil {
			// A review that fails at an object is answered without reading the rest of it,
			// so only a failure may answer a body that is not a whole review.
			if got.Response.Result.Status != "Failure" {
				t.Fatalf("answered %q to a body that is not a review: %q", got.Response.Result.Status, body)
			}
			return
		}
		if got.Response.UID != string(sent.Request.UID) {
			t.Fatalf("uid %q, want %q", got.Response.UID, sent.Request.UID)
		}
		switch got.Response.Result.Status {
		case "Success":
			if len(got.Response.ConvertedObjects) != len(sent.Request.Objects) {
				t.Fatalf("%d objects answered for %d sent", len(got.Response.ConvertedObjects), len(sent.Request.Objects))
			}
			for i, o := range got.Response.ConvertedObjects {
				if !json.Valid(o) {
					t.Fatalf("object %d is not valid JSON: %s", i, o)
				}
			}
		case "Failure":
			if len(got.Response.ConvertedObjects) != 0 {
				t.Fatalf("a failure carries %d objects", len(got.Response.ConvertedObjects))
			}
		default:
			t.Fatalf("result status %q", got.Response.Result.Status)
		}
	})
}
