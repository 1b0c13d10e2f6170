package main

// Bounded reading of outside files: only regular files (a device such as /dev/zero, a FIFO or a
// directory is refused before a byte is read), and never more than a bound decided before
// reading.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MiB is 2^20 bytes.
const MiB = 1 << 20

// openRegular opens path for reading only if it is a regular file. O_NONBLOCK keeps a FIFO
// from blocking the open; the check is made on the opened file, so nothing is swapped in
// between.
func openRegular(path, what string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, badInput("%s: %s not found", path, what)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, 0, badInput("%s: cannot open the %s (%v)", path, what, pe.Err)
		}
		return nil, 0, badInput("%s: cannot open the %s (%v)", path, what, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, badInput("%s: cannot read the %s (%v)", path, what, err)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		kind := "not a regular file"
		switch {
		case info.IsDir():
			kind = "a directory"
		case info.Mode()&fs.ModeDevice != 0:
			kind = "a device"
		case info.Mode()&fs.ModeNamedPipe != 0:
			kind = "a FIFO"
		case info.Mode()&fs.ModeSocket != 0:
			kind = "a socket"
		}
		return nil, 0, badInput("%s: the %s is %s, not a regular file", path, what, kind)
	}
	return f, info.Size(), nil
}

// readRegular reads a whole regular file of at most limit bytes.
func readRegular(path, what string, limit int64) ([]byte, error) {
	f, size, err := openRegular(path, what)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > limit {
		return nil, badInput("%s: the %s is %d bytes, more than the %d this reader accepts", path, what, size, limit)
	}
	// Read one byte past the size: a file that grew since it was measured is caught too.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, badInput("%s: cannot read the %s (%v)", path, what, err)
	}
	if int64(len(data)) > limit {
		return nil, badInput("%s: the %s grew past %d bytes while being read", path, what, limit)
	}
	return data, nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= MiB:
		return fmt.Sprintf("%.1f MiB", float64(n)/MiB)
	case n >= 1024:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%d B", n)
}
