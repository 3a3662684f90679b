package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/branchnfs/branchnfs/branches"
)

// Error codes of the API. They are stable: scripts may match on them.
const (
	CodeNotFound     = "not_found"      // 404: no branch or checkpoint of that name
	CodeExists       = "exists"         // 409: a branch or checkpoint of that name exists
	CodeInvalidName  = "invalid_name"   // 400: name outside [A-Za-z0-9._-]{1,64}
	CodeInvalidated  = "invalidated"    // 410: branch invalidated, committed or aborted
	CodeConflict     = "conflict"       // 409: merge conflict; "paths" lists them
	CodeHasChildren  = "has_children"   // 409: live children; "children" lists them
	CodeReadOnly     = "read_only"      // 403: main cannot be committed or aborted
	CodeNotOwner     = "not_owner"      // 409: another server (or none) owns the branch; see takeover
	CodeNoSpace      = "no_space"       // 507: disk full, nothing changed
	CodeInUse        = "in_use"         // 409: NFS clients use the branch; "clients" lists them
	CodeBadRequest   = "bad_request"    // 400: malformed request, unknown endpoint (404)
	CodeUnauthorized = "unauthorized"   // 401: no token, or a wrong one (Authorization: Bearer TOKEN)
	CodeOutside      = "outside_branch" // 400: a file path leaves the branch (absolute, "..", or a symlink out of it)
	CodeNoMatch      = "no_match"       // 409: an edit's old string does not occur in the file
	CodeNotUnique    = "not_unique"     // 409: an edit's old string occurs more than once
	CodeInternal     = "internal"       // 500: anything else
)

// Error is an API error as the client received it. It matches the
// corresponding branches sentinel with errors.Is.
type Error struct {
	Status  int    // HTTP status
	Code    string // one of the Code constants
	Message string // human readable, from the server
}

func (e *Error) Error() string { return e.Message }

// Is matches the branches sentinel of e's code.
func (e *Error) Is(target error) bool {
	s := sentinel(e.Code)
	if s == nil {
		return false
	}
	if target == s {
		return true
	}
	// Every invalidated error is also stale, as in branches.
	return e.Code == CodeInvalidated && target == branches.ErrStale
}

// ErrBadRequest matches errors with code bad_request.
var ErrBadRequest = errors.New("control: bad request")

// ErrOutsideBranch matches errors with code outside_branch: a file path
// that is absolute, has a ".." component, or follows a symlink out of the
// branch.
var ErrOutsideBranch = errors.New("control: path outside the branch")

// ErrNoMatch matches errors with code no_match: an edit whose old string
// does not occur in the file.
var ErrNoMatch = errors.New("control: no match")

// ErrNotUnique matches errors with code not_unique: an edit whose old
// string occurs more than once (and replace_all is not set).
var ErrNotUnique = errors.New("control: not unique")

// ErrInUse matches errors with code in_use: a commit or abort refused
// because NFS clients use the branch.
var ErrInUse = errors.New("branch in use")

// InUseError is a commit or abort refused because NFS clients use the
// branch (see nfsserver.Server.BranchUsers). It matches ErrInUse.
type InUseError struct {
	Branch  string
	Clients []string // "CLIENT:PATH mounted", "ADDRESS used its files 5s ago"
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("%v: branch %q is used by NFS clients (%s): unmount it first, or force it (branchnfs commit/abort --force; API: {\"force\": true})",
		ErrInUse, e.Branch, strings.Join(e.Clients, "; "))
}

func (e *InUseError) Is(target error) bool { return target == ErrInUse }

func sentinel(code string) error {
	switch code {
	case CodeNotFound:
		return branches.ErrNotFound
	case CodeExists:
		return branches.ErrExists
	case CodeInvalidName:
		return branches.ErrInvalidName
	case CodeInvalidated:
		return branches.ErrInvalidated
	case CodeConflict:
		return branches.ErrConflict
	case CodeHasChildren:
		return branches.ErrHasChildren
	case CodeReadOnly:
		return branches.ErrReadOnly
	case CodeNotOwner:
		return branches.ErrNotOwner
	case CodeNoSpace:
		return branches.ErrNoSpace
	case CodeBadRequest:
		return ErrBadRequest
	case CodeInUse:
		return ErrInUse
	case CodeUnauthorized:
		return ErrUnauthorized
	case CodeOutside:
		return ErrOutsideBranch
	case CodeNoMatch:
		return ErrNoMatch
	case CodeNotUnique:
		return ErrNotUnique
	}
	return nil
}

// Classify returns the API code and HTTP status for err.
func Classify(err error) (code string, status int) {
	switch {
	case errors.Is(err, branches.ErrInvalidName):
		return CodeInvalidName, http.StatusBadRequest
	case errors.Is(err, branches.ErrNotFound):
		return CodeNotFound, http.StatusNotFound
	case errors.Is(err, branches.ErrExists):
		return CodeExists, http.StatusConflict
	case errors.Is(err, branches.ErrConflict):
		return CodeConflict, http.StatusConflict
	case errors.Is(err, branches.ErrHasChildren):
		return CodeHasChildren, http.StatusConflict
	case errors.Is(err, branches.ErrInvalidated), errors.Is(err, branches.ErrStale):
		return CodeInvalidated, http.StatusGone
	case errors.Is(err, branches.ErrNotOwner):
		return CodeNotOwner, http.StatusConflict
	case errors.Is(err, branches.ErrReadOnly):
		return CodeReadOnly, http.StatusForbidden
	case errors.Is(err, branches.ErrNoSpace):
		return CodeNoSpace, http.StatusInsufficientStorage
	case errors.Is(err, ErrBadRequest):
		return CodeBadRequest, http.StatusBadRequest
	case errors.Is(err, ErrInUse):
		return CodeInUse, http.StatusConflict
	case errors.Is(err, ErrUnauthorized):
		return CodeUnauthorized, http.StatusUnauthorized
	case errors.Is(err, ErrOutsideBranch):
		return CodeOutside, http.StatusBadRequest
	case errors.Is(err, ErrNoMatch):
		return CodeNoMatch, http.StatusConflict
	case errors.Is(err, ErrNotUnique):
		return CodeNotUnique, http.StatusConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return CodeInternal, http.StatusServiceUnavailable
	}
	return CodeInternal, http.StatusInternalServerError
}

// errorBody is the JSON shape of every error response.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code          string   `json:"code"`
	Message       string   `json:"message"`
	Branch        string   `json:"branch,omitempty"`
	Parent        string   `json:"parent,omitempty"`
	Paths         []string `json:"paths,omitempty"`          // conflict
	Children      []string `json:"children,omitempty"`       // has_children
	InvalidatedBy string   `json:"invalidated_by,omitempty"` // invalidated
	Clients       []string `json:"clients,omitempty"`        // in_use
}

func makeErrorBody(err error) (errorBody, int) {
	code, status := Classify(err)
	d := errorDetail{Code: code, Message: err.Error()}
	var ce *branches.ConflictError
	var he *branches.HasChildrenError
	var ie *branches.InvalidatedError
	var ue *InUseError
	switch {
	case errors.As(err, &ce):
		d.Branch, d.Parent, d.Paths = ce.Branch, ce.Parent, ce.Paths
	case errors.As(err, &he):
		d.Branch, d.Children = he.Branch, he.Children
	case errors.As(err, &ie):
		d.Branch, d.InvalidatedBy = ie.Branch, ie.By
	case errors.As(err, &ue):
		d.Branch, d.Clients = ue.Branch, ue.Clients
	}
	return errorBody{Error: d}, status
}

// toError turns a decoded error body back into a Go error, rebuilding the
// typed branches errors where the body carries their fields.
func (d errorDetail) toError(status int) error {
	switch {
	case d.Code == CodeConflict && d.Branch != "":
		return &branches.ConflictError{Branch: d.Branch, Parent: d.Parent, Paths: d.Paths}
	case d.Code == CodeHasChildren && d.Branch != "":
		return &branches.HasChildrenError{Branch: d.Branch, Children: d.Children}
	case d.Code == CodeInvalidated && d.InvalidatedBy != "":
		return &branches.InvalidatedError{Branch: d.Branch, By: d.InvalidatedBy}
	case d.Code == CodeInUse && d.Branch != "":
		return &InUseError{Branch: d.Branch, Clients: d.Clients}
	}
	code := d.Code
	if sentinel(code) == nil {
		code = CodeInternal
	}
	msg := d.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Status: status, Code: code, Message: msg}
}
