// SPDX-License-Identifier: Apache-2.0
// stderr (the agent's log) into a file while a test looks at what was written.
#pragma once

#include <cstdio>
#include <string>
#include <unistd.h>

namespace ipmasq::test {

// stderr into a file while it lives; text() is what was written (and ends the capture).
class CapturedStderr
{
public:
	CapturedStderr() : file_(std::tmpfile()), saved_(dup(STDERR_FILENO))
	{
		std::fflush(stderr);
		dup2(fileno(file_), STDERR_FILENO);
	}
	~CapturedStderr()
	{
		restore();
		std::fclose(file_);
	}
	CapturedStderr(const CapturedStderr &) = delete;
	CapturedStderr &operator=(const CapturedStderr &) = delete;
	std::string text()
	{
		restore();
		std::string out(1 << 16, '\0');
		const ssize_t n = pread(fileno(file_), out.data(), out.size(), 0);
		out.resize(n > 0 ? static_cast<size_t>(n) : 0);
		return out;
	}

private:
	void restore()
	{
		std::fflush(stderr);
		if (saved_ >= 0)
			dup2(saved_, STDERR_FILENO), close(saved_);
		saved_ = -1;
	}
	FILE *file_;
	int saved_;
};

} // namespace ipmasq::test
