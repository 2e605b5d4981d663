// SPDX-License-Identifier: Apache-2.0
// EPERM and EACCES from netlink: the message blames a missing capability only when the
// process lacks it, and otherwise says what else refuses.
#include <catch2/catch.hpp>

#include <cerrno>

#include "ip-masq-agent/netlink/refusal.h"

using namespace ipmasq;
using namespace ipmasq::netlink;

TEST_CASE("refusal: EPERM without CAP_NET_ADMIN names the capability")
{
	const Error error = explainRefusal(Error("reading the counters: Operation not permitted", EPERM),
					   Privileges{false, true});
	CHECK(error.errnum == EPERM);
	CHECK(error.message ==
	      "reading the counters: Operation not permitted (the kernel answered EPERM: the agent "
	      "lacks CAP_NET_ADMIN, which nfnetlink requires in the user namespace that owns this "
	      "network namespace: run it as root, or grant the capability)");
}

TEST_CASE("refusal: EPERM with CAP_NET_ADMIN in a user namespace that does not own the network "
	  "namespace")
{
	const std::string reason = refusalReason(EPERM, Privileges{true, false});
	CHECK_THAT(reason, Catch::StartsWith("the agent has CAP_NET_ADMIN, but only in a user "
					     "namespace of its own"));
	CHECK_THAT(reason, !Catch::Contains("lacks"));
}

TEST_CASE("refusal: EPERM with CAP_NET_ADMIN where it counts is something else's refusal")
{
	for (const std::optional<bool> reaches : {std::optional<bool>(true), std::optional<bool>()}) {
		const std::string reason = refusalReason(EPERM, Privileges{true, reaches});
		CHECK_THAT(reason, Catch::Contains("something other than capabilities refused") &&
					   Catch::Contains("seccomp") && !Catch::Contains("lacks"));
	}
}

TEST_CASE("refusal: EACCES is a security module, whatever the capabilities")
{
	for (const bool netAdmin : {false, true}) {
		const Error error =
			explainRefusal(Error("x: Permission denied", EACCES), Privileges{netAdmin, true});
		CHECK_THAT(error.message, Catch::StartsWith("x: Permission denied (the kernel answered "
							    "EACCES: a security module"));
	}
}

TEST_CASE("refusal: any other errno is left as it is")
{
	for (const int errnum : {0, ENOENT, EINVAL, ETIMEDOUT}) {
		CHECK(refusalReason(errnum, Privileges{false, false}).empty());
		const Error error = explainRefusal(Error("as it was", errnum));
		CHECK(error.message == "as it was");
		CHECK(error.errnum == errnum);
	}
}
