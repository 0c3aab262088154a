package apitraffic

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// OwnRecord is what one run of our own tooling (widgetctl, from a laptop or a hook) sent
// through one version of a resource and got an answer to: the traffic check subtracts it, so
// that verify, backup, the restore drill and the preflights' own round trips never hold the
// gate they prepare. From and To bound the requests: a record counts only against a window
// it lies wholly inside.
type OwnRecord struct {
	// Client is the user agent that sent the requests ("widgetctl verify").
	Client   string             `json:"client"`
	Version  string             `json:"version"`
	From     time.Time          `json:"from"`
	To       time.Time          `json:"to"`
	Requests map[string]float64 `json:"requests"`
}

// OwnCounter counts, at the transport, every request this process sends for the resources of
// one group, by version and by the verb label kube-apiserver counts it under
// (apiserver_request_total). It is counted when an answer arrives, once per attempt (a client
// retry is a second request for the apiserver too), and only for answers the apiserver counts
// itself: an answer of 401 or 403 (refused before the request handler) or 5xx is left out, so
// that a doubt always leaves a request counted against us, never against another client.
type OwnCounter struct {
	group, resource, client string
	now                     func() time.Time

	mu       sync.Mutex
	from, to map[string]time.Time
	counts   map[string]map[string]float64
}

// NewOwnCounter counts the requests for group/resource sent by client (a user agent).
func NewOwnCounter(group, resource, client string) *OwnCounter {
	return &OwnCounter{group: group, resource: resource, client: client, now: time.Now}
}

// Wrap is a transport wrapper for rest.Config.Wrap.
func (o *OwnCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		version, verb, ok := o.classify(req)
		sent := o.now()
		resp, err := rt.RoundTrip(req)
		if ok && err == nil && countedByAPIServer(resp.StatusCode) {
			o.add(version, verb, sent)
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// countedByAPIServer: the status codes of answers that kube-apiserver's request handler gave,
// which it counts in apiserver_request_total. Authentication and authorization refuse before
// it (401, 403; an admission denial, also 403, is left out too), and a 5xx may come from a
// proxy in between: those are not subtracted.
func countedByAPIServer(code int) bool {
	return code < 500 && code != http.StatusUnauthorized && code != http.StatusForbidden
}

// classify returns the version and the apiserver's verb label of a request for the counter's
// resource (any subresource), as kube-apiserver's request info and metrics name them.
func (o *OwnCounter) classify(req *http.Request) (version, verb string, ok bool) {
	// /apis/GROUP/VERSION[/watch][/namespaces/NS]/RESOURCE[/NAME[/SUBRESOURCE]]
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if len(parts) < 4 || parts[0] != "apis" || parts[1] != o.group {
		return "", "", false
	}
	version, rest := parts[2], parts[3:]
	watchPath := rest[0] == "watch"
	if watchPath {
		rest = rest[1:]
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 || rest[0] != o.resource {
		return "", "", false
	}
	named := len(rest) > 1
	q := req.URL.Query()
	switch req.Method {
	case http.MethodGet:
		switch w := q.Get("watch"); {
		case watchPath || w == "true" || w == "1":
			verb = "WATCH"
		case named:
			verb = "GET"
		default:
			verb = "LIST"
		}
	case http.MethodPatch:
		verb = "PATCH"
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
			verb = "APPLY"
		}
	case http.MethodDelete:
		verb = "DELETE"
		if !named {
			verb = "DELETECOLLECTION"
		}
	default:
		verb = req.Method
	}
	return version, verb, true
}

func (o *OwnCounter) add(version, verb string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts, o.from, o.to = map[string]map[string]float64{}, map[string]time.Time{}, map[string]time.Time{}
	}
	if o.counts[version] == nil {
		o.counts[version] = map[string]float64{}
		o.from[version] = at
	}
	o.counts[version][verb]++
	o.to[version] = o.now()
}

// Take returns what was counted since the last Take, one record per version, and starts
// afresh.
func (o *OwnCounter) Take() []OwnRecord {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []OwnRecord
	for _, v := range slices.Sorted(maps.Keys(o.counts)) {
		out = append(out, OwnRecord{Client: o.client, Version: v, From: o.from[v], To: o.to[v], Requests: o.counts[v]})
	}
	o.counts = nil
	return out
}
