// SPDX-License-Identifier: Apache-2.0
// Reading a file, and listing a directory's files, with bounds that no content can pass and
// without ever blocking on a FIFO or opening a device: the mechanics that the config and
// the discovered-range files share. Callers word the messages.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "ip-masq-agent/base/error.h"

namespace ipmasq {

// What reading a path as a regular file came to.
struct FileRead {
	enum class Outcome {
		text,	    // `text` holds the whole file
		absent,	    // no such file (ENOENT)
		notRegular, // `mode` says what it is instead (symlinks followed): never opened, or closed unread
		tooLarge,   // more than the bound: `size` bytes, or growing past the bound while read (size -1)
		failed,	    // `errnum` says why
	};
	Outcome outcome = Outcome::failed;
	std::string text;
	mode_t mode = 0;
	off_t size = 0;
	int errnum = 0;
};

// Reads `path` (symlinks followed) if it is a regular file of at most `maxBytes`: looked at
// before it is opened (opening a device can have effects, a FIFO would block), opened
// non-blocking, checked again once open (the path may have been swapped), and read one
// byte past the bound so that a file growing while it is read is caught.
FileRead readBoundedFile(const std::string &path, size_t maxBytes);

// The error for a read that gave no text (absent included), in plain words:
// "PATH: is a FIFO (named pipe), not a regular file (symlinks followed)", "PATH: is N bytes,
// more than the MAX bytes it may have", "PATH: cannot read it: REASON", "PATH: does not
// exist". For files whose own rules need no other words.
Error fileReadError(const std::string &path, const FileRead &read, size_t maxBytes);

// What a path that is not a regular file is, for messages: "a directory", "a FIFO (named
// pipe)", "a character device", "a block device", "a socket" or "not a regular file".
const char *fileKindName(mode_t mode);

// What listing a directory came to.
struct DirListing {
	enum class Outcome {
		names,	     // `names`: the matching regular files, in byte order
		absent,	     // no such directory
		notDirectory,
		tooManyEntries, // more than `maxEntries` entries, matching or not
		tooManyFiles,	// more than `maxFiles` matching regular files
		failed,	     // `errnum` (and `name`, if it was about one entry) say why
	};
	Outcome outcome = Outcome::failed;
	std::vector<std::string> names;
	std::string name;
	int errnum = 0;
};

// The names of the entries of `dir` for which `wanted(name)` is true and that are regular
// files once symlinks are followed (a dangling symlink, a FIFO, a socket or a subdirectory
// is skipped, and never opened). At most `maxEntries` entries are looked at and
// `maxFiles` kept: a bound on the listing's loop and on what the caller then reads.
DirListing listRegularFiles(const std::string &dir, const std::function<bool(std::string_view)> &wanted,
			    size_t maxFiles, size_t maxEntries);

} // namespace ipmasq
