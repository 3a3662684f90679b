package results

import "testing"

func TestQuotePath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain/name.txt", "plain/name.txt"},
		{"with space", "with space"},
		{"new\nline", `"new\nline"`},
		{"tab\there", `"tab\there"`},
		{"esc\x1b[31mred", `"esc\033[31mred"`},
		{`quote"d`, `"quote\"d"`},
		{`back\slash`, `"back\\slash"`},
		{"del\x7f", `"del\177"`},
		{"caf\xc3\xa9", `"caf\303\251"`},
		{"cr\r", `"cr\r"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := QuotePath(tt.in); got != tt.want {
				t.Errorf("QuotePath(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}
