package s3gw

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// CredentialsName is the file name of the S3 credentials inside the store
// directory.
const CredentialsName = "s3.credentials"

// Profile is the profile name the credentials file uses (aws CLI format).
const Profile = "branchnfs"

// CredentialsPath returns the S3 credentials path of a store directory.
func CredentialsPath(storeDir string) string { return filepath.Join(storeDir, CredentialsName) }

// Credentials are the store's S3 access key and secret.
type Credentials struct {
	AccessKeyID     string `json:"aws_access_key_id"`
	SecretAccessKey string `json:"aws_secret_access_key"`
}

// Format returns c as an aws CLI credentials file section.
func (c Credentials) Format() string {
	return fmt.Sprintf("[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n", Profile, c.AccessKeyID, c.SecretAccessKey)
}

// newCredentials makes a random key pair: an access key of 20 upper-case
// letters and digits starting with BNFS, and a 40-character secret.
func newCredentials() (Credentials, error) {
	var id [10]byte
	var secret [30]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Credentials{}, err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return Credentials{}, err
	}
	ak := "BNFS" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(id[:])[:16]
	sk := base64.RawURLEncoding.EncodeToString(secret[:])
	return Credentials{AccessKeyID: ak, SecretAccessKey: sk}, nil
}

// EnsureCredentials returns the store's S3 credentials, creating
// STORE/s3.credentials (mode 0600) if it is missing. A new file is linked
// into place, so two processes racing to create it agree on one key pair.
func EnsureCredentials(storeDir string) (Credentials, error) {
	path := CredentialsPath(storeDir)
	c, err := ReadCredentials(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	c, err = newCredentials()
	if err != nil {
		return Credentials{}, fmt.Errorf("s3gw: credentials: %w", err)
	}
	f, err := os.CreateTemp(storeDir, "."+CredentialsName+".*") // mode 0600
	if err != nil {
		return Credentials{}, fmt.Errorf("s3gw: credentials: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(c.Format()); err != nil {
		f.Close()
		return Credentials{}, fmt.Errorf("s3gw: credentials: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return Credentials{}, fmt.Errorf("s3gw: credentials: %w", err)
	}
	if err := f.Close(); err != nil {
		return Credentials{}, fmt.Errorf("s3gw: credentials: %w", err)
	}
	if err := os.Link(f.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return Credentials{}, fmt.Errorf("s3gw: credentials: %w", err)
	}
	return ReadCredentials(path)
}

// ReadCredentials reads a credentials file EnsureCredentials made. The
// error matches fs.ErrNotExist when the file is missing, ErrCredentials
// when it is malformed or readable by others than its owner.
func ReadCredentials(path string) (Credentials, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("s3gw: credentials: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return Credentials{}, fmt.Errorf("%w: %s is %v, readable by others than its owner: remove it (serve then makes new credentials) and give the new ones to your clients", ErrCredentials, path, fi.Mode())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("s3gw: credentials: %w", err)
	}
	var c Credentials
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "aws_access_key_id":
			c.AccessKeyID = strings.TrimSpace(v)
		case "aws_secret_access_key":
			c.SecretAccessKey = strings.TrimSpace(v)
		}
	}
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return Credentials{}, fmt.Errorf("%w: %s lacks aws_access_key_id or aws_secret_access_key: remove it (serve then makes new credentials)", ErrCredentials, path)
	}
	return c, nil
}
