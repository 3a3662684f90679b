package s3gw_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/nfsserver/s3gw"
)

// target is an S3 server and a bucket on it.
type target struct {
	c      *s3.Client
	bucket string
}

// targets returns branchnfs's S3 API (branch b) and versitygw's posix
// backend on the same disk (the temporary directory), for a ratio in one
// run.
func targets(b *testing.B) map[string]target {
	e := start(b)
	out := map[string]target{"branchnfs": {e.c, "b"}}
	s := testbin.StartS3(b)
	out["versitygw-posix"] = target{client(s.Endpoint, s3gw.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey}), s.Bucket}
	return out
}

func BenchmarkObject(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{1 << 20, 64 << 20} {
		data := bytes.Repeat([]byte("branchnfs s3 bench "), size/19+1)[:size]
		for _, name := range []string{"branchnfs", "versitygw-posix"} {
			b.Run(fmt.Sprintf("size=%dMiB/server=%s/op=put", size>>20, name), func(b *testing.B) {
				tg := targets(b)[name]
				b.SetBytes(int64(size))
				for i := 0; b.Loop(); i++ {
					if _, err := tg.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &tg.bucket, Key: aws.String(fmt.Sprintf("k%d", i%4)), Body: bytes.NewReader(data)}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("size=%dMiB/server=%s/op=get", size>>20, name), func(b *testing.B) {
				tg := targets(b)[name]
				if _, err := tg.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &tg.bucket, Key: aws.String("k"), Body: bytes.NewReader(data)}); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				for b.Loop() {
					out, err := tg.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &tg.bucket, Key: aws.String("k")})
					if err != nil {
						b.Fatal(err)
					}
					if n, _ := io.Copy(io.Discard, out.Body); n != int64(size) {
						b.Fatalf("read %d bytes", n)
					}
					out.Body.Close()
				}
			})
		}
	}
}

// BenchmarkListObjectsV2 lists 10,000 keys (100 directories of 100), in
// pages of 1000.
func BenchmarkListObjectsV2(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"branchnfs", "versitygw-posix"} {
		b.Run("keys=10000/server="+name, func(b *testing.B) {
			tg := targets(b)[name]
			for i := 0; i < 10000; i++ {
				if _, err := tg.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &tg.bucket, Key: aws.String(fmt.Sprintf("d%03d/k%05d", i%100, i)), Body: bytes.NewReader([]byte("x"))}); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				n := 0
				p := s3.NewListObjectsV2Paginator(tg.c, &s3.ListObjectsV2Input{Bucket: &tg.bucket})
				for p.HasMorePages() {
					out, err := p.NextPage(ctx)
					if err != nil {
						b.Fatal(err)
					}
					n += len(out.Contents)
				}
				if n != 10000 {
					b.Fatalf("listed %d keys", n)
				}
			}
		})
	}
}

// BenchmarkCopyObject copies a 256 MiB object within a branch.
func BenchmarkCopyObject(b *testing.B) {
	ctx := context.Background()
	const size = 256 << 20
	e := start(b)
	data := bytes.Repeat([]byte("copy me "), size/8)
	if _, err := e.c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("src"), Body: bytes.NewReader(data)}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for i := 0; b.Loop(); i++ {
		if _, err := e.c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("b"), Key: aws.String(fmt.Sprintf("dst%d", i%2)), CopySource: aws.String("b/src")}); err != nil {
			b.Fatal(err)
		}
	}
}
