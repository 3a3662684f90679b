package par

// Two runs first on a goroutine of its own and second on the calling one,
// waits for both, and returns first's error if any, else second's. A panic
// in either is raised again on the calling goroutine, once both are done
// (so the caller's recovery, a request's, handles it, and neither half
// still writes into the caller's buffers).
func Two(first, second func() error) error {
	type result struct {
		err   error
		panic any
	}
	done := make(chan result, 1)
	go func() {
		var res result
		defer func() {
			if p := recover(); p != nil {
				res.panic = p
			}
			done <- res
		}()
		res.err = first()
	}()
	var err error
	var p any
	func() {
		defer func() { p = recover() }()
		err = second()
	}()
	res := <-done
	if p == nil {
		p = res.panic
	}
	if p != nil {
		panic(p)
	}
	if res.err != nil {
		return res.err
	}
	return err
}
