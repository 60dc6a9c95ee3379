package proto

// Helpers shared by the Validate methods. Each returns nil or an *Error (as error, never a
// typed nil).

func invalid(format string, args ...any) error {
	return Errorf(CodeInvalidArgument, format, args...)
}

// quote quotes s for an error message, cut to a readable length.
func quote(s string) string {
	const max = 40
	if len(s) > max {
		s = s[:max] + "…"
	}
	return "\"" + sanitize(s) + "\""
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = '?'
		}
	}
	return string(b)
}

func checkRequestID(id uint64) error {
	if id == 0 {
		return invalid("request id 0: ids start at 1")
	}
	return nil
}

func checkID(what, s string) error {
	if !ValidID(s) {
		return invalid("bad %s %s: want 1 to %d printable ASCII bytes without space", what, quote(s), MaxIDLen)
	}
	return nil
}

// checkMutation checks the fields every mutation shares.
func checkMutation(id uint64, conv, cmid string) error {
	if err := checkRequestID(id); err != nil {
		return err
	}
	if err := checkID("conversation id", conv); err != nil {
		return err
	}
	return checkID("client_msg_id", cmid)
}

// checkMembers checks a member list: at least min and at most MaxMembers valid user ids.
func checkMembers(members []string, min int) error {
	if len(members) > MaxMembers {
		return Errorf(CodeTooLarge, "%d members in one request, at most %d", len(members), MaxMembers)
	}
	if len(members) < min {
		return invalid("no members named")
	}
	for _, m := range members {
		if err := checkID("member id", m); err != nil {
			return err
		}
	}
	return nil
}
