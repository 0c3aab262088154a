package migrate

import (
	"errors"
	"fmt"
)

// RefusedError is a refusal: the migration did not start, or did not trim, because a
// precondition does not hold. Nothing was changed that needs undoing; the message says what
// to do next. widgetctl exits with status 1 for it (2 for other errors).
type RefusedError struct{ msg string }

func (e *RefusedError) Error() string { return e.msg }

func refusef(format string, args ...any) error {
	return &RefusedError{msg: fmt.Sprintf(format, args...)}
}

// IsRefused reports whether err is, or wraps, a RefusedError.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}
