package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
)

// This file finds the members of a JSON object without decoding them: the conversion and
// admission webhooks pass metadata and status through as the bytes they came as, so the
// only copy of them is the response. Every function here expects valid JSON (a json.Decoder
// or the admission decoder has checked it) and reports, never panics on, anything else.

var (
	errNotObject = errors.New("not a JSON object")
	errNotArray  = errors.New("not a JSON array")
)

// member is one "key": value of an object, as spans of the object's bytes.
type member struct {
	key   []byte // the key as written, quotes included
	value []byte
	start int // offset of the key's opening quote
	end   int // offset just after the value
}

// eachMember calls fn for every member of the object raw, in order, until fn returns false.
// Duplicate keys are reported each time; callers keep the last, as encoding/json does.
func eachMember(raw []byte, fn func(m member) bool) error {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return errNotObject
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return nil
	}
	for i < len(raw) {
		if raw[i] != '"' {
			return errNotObject
		}
		keyEnd := skipValue(raw, i)
		if keyEnd < 0 {
			return errNotObject
		}
		colon := skipSpace(raw, keyEnd)
		if colon >= len(raw) || raw[colon] != ':' {
			return errNotObject
		}
		valueStart := skipSpace(raw, colon+1)
		valueEnd := skipValue(raw, valueStart)
		if valueEnd < 0 {
			return errNotObject
		}
		if !fn(member{key: raw[i:keyEnd], value: raw[valueStart:valueEnd], start: i, end: valueEnd}) {
			return nil
		}
		i = skipSpace(raw, valueEnd)
		if i >= len(raw) {
			return errNotObject
		}
		switch raw[i] {
		case '}':
			return nil
		case ',':
			i = skipSpace(raw, i+1)
		default:
			return errNotObject
		}
	}
	return errNotObject
}

// eachElement calls fn for every element of the array raw (or nothing for null), in order,
// until fn returns false.
func eachElement(raw []byte, fn func(element []byte) bool) error {
	i := skipSpace(raw, 0)
	if bytes.HasPrefix(raw[i:], []byte("null")) {
		return nil
	}
	if i >= len(raw) || raw[i] != '[' {
		return errNotArray
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return nil
	}
	for i < len(raw) {
		end := skipValue(raw, i)
		if end < 0 {
			return errNotArray
		}
		if !fn(raw[i:end]) {
			return nil
		}
		i = skipSpace(raw, end)
		if i >= len(raw) {
			return errNotArray
		}
		switch raw[i] {
		case ']':
			return nil
		case ',':
			i = skipSpace(raw, i+1)
		default:
			return errNotArray
		}
	}
	return errNotArray
}

// memberValue returns the value of the last member named key (quotes included in key), or
// nil when there is none.
func memberValue(raw []byte, key string) ([]byte, error) {
	var value []byte
	err := eachMember(raw, func(m member) bool {
		if string(m.key) == key {
			value = m.value
		}
		return true
	})
	return value, err
}

// jsonStringBytes returns a JSON string value without its quotes: a span of value when it
// has no escapes, decoded otherwise; nil when value is not a string.
func jsonStringBytes(value []byte) []byte {
	if len(value) < 2 || value[0] != '"' {
		return nil
	}
	if bytes.IndexByte(value, '\\') < 0 {
		return value[1 : len(value)-1 : len(value)-1]
	}
	s, ok := jsonString(value)
	if !ok {
		return nil
	}
	return []byte(s)
}

// jsonString decodes a JSON string value; the common case, no escapes, costs no copy.
func jsonString(value []byte) (string, bool) {
	if len(value) < 2 || value[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(value, '\\') < 0 {
		return string(value[1 : len(value)-1]), true
	}
	var s string
	if json.Unmarshal(value, &s) != nil {
		return "", false
	}
	return s, true
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) {
		switch raw[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the offset just after the value that starts at raw[i], or -1 when raw
// ends first. Nesting is counted, not recursed into, so depth costs no stack.
func skipValue(raw []byte, i int) int {
	if i >= len(raw) {
		return -1
	}
	switch raw[i] {
	case '"':
		return skipString(raw, i)
	case '{', '[':
		depth := 0
		for i < len(raw) {
			switch raw[i] {
			case '"':
				i = skipString(raw, i)
				if i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	// A number or a literal: it ends at the next delimiter.
	for i < len(raw) {
		switch raw[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

// skipString returns the offset just after the string that starts at raw[i] (a quote). It
// jumps from quote to quote; a quote after an odd run of backslashes is escaped.
func skipString(raw []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(raw[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		backslashes := 0
		for p := q - 1; p > i && raw[p] == '\\'; p-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}
