// SPDX-License-Identifier: Apache-2.0
// The one error model: a Result<T> is either a value or an Error that says what went wrong.
#pragma once

#include <string>
#include <utility>

#include <tl/expected.hpp>

namespace ipmasq {

// An Error carries a complete, human-readable message (what, where, why and how to fix)
// plus the errno it came from, if any, so that callers can branch on EPERM or ENOENT
// without parsing text. Exceptions from yaml-cpp and Boost are converted at the boundary.
struct Error {
	std::string message;
	int errnum = 0;

	Error() = default;
	explicit Error(std::string msg, int err = 0) : message(std::move(msg)), errnum(err) {}

	// Prefix context ("/etc/config/ip-masq-agent: ") to an error coming from below.
	Error withContext(const std::string &context) const
	{
		return Error(context + message, errnum);
	}
};

// A value or the Error that kept it from being made. [[nodiscard]]: dropping a result
// unread is a compile error, so no failure goes unnoticed by accident; a caller that
// means to ignore one says so (and why) with a cast to void.
template<typename T>
class [[nodiscard]] Result : public tl::expected<T, Error>
{
public:
	using Base = tl::expected<T, Error>;
	using Base::Base;
	Result() = default;
	Result(const Base &base) : Base(base) {}
	Result(Base &&base) : Base(std::move(base)) {}
};

// Success, or the Error that says what failed.
using Status = Result<void>;

inline tl::unexpected<Error> fail(std::string message, int errnum = 0)
{
	return tl::unexpected<Error>(Error(std::move(message), errnum));
}

inline tl::unexpected<Error> fail(Error error)
{
	return tl::unexpected<Error>(std::move(error));
}

} // namespace ipmasq
