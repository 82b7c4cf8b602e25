package redact

import "net/url"

// URLSecrets are the credentials a URL carries: its password and its query values (none when
// raw is not a URL).
func URLSecrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var s []string
	if p, ok := u.User.Password(); ok {
		s = append(s, p)
	}
	for _, vs := range u.Query() {
		s = append(s, vs...)
	}
	return s
}

// redactedPart stands for a secret in a URL (no characters a URL escapes).
const redactedPart = "REDACTED"

// URL is raw with its userinfo and every query value replaced by REDACTED, for storing
// (the manifest) and printing; a URL without either is returned as it is, and text that is not
// a URL too.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil && u.RawQuery == "" {
		return raw
	}
	if u.User != nil {
		u.User = url.User(redactedPart)
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k, vs := range q {
			for i := range vs {
				vs[i] = redactedPart
			}
			q[k] = vs
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}
