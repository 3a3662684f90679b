package main

import (
	"context"
)

func runApplyGit(ctx context.Context, o *applyOptions) error {
	return usagef("--git-branch is not available yet")
}
