// SPDX-License-Identifier: Apache-2.0
// Why the kernel refused a netlink request with EPERM or EACCES, in words an operator can act on.
//
// nfnetlink (nf_tables, ctnetlink) answers EPERM when the sender lacks CAP_NET_ADMIN in the
// user namespace that owns the network namespace. It is not the only one that refuses: a
// process with the capability only in a user namespace of its own (a user-namespaced
// container) gets EPERM too, and a seccomp filter or a security module (AppArmor, SELinux,
// a BPF LSM) can answer EPERM or EACCES to a process that holds the capability where it
// counts. Blaming a missing capability then sends the operator after the wrong fix, so the
// message says what the kernel answered and which of these the agent's own view rules out.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "ip-masq-agent/base/error.h"

namespace ipmasq::netlink {

// What the process holds that nfnetlink checks.
struct Privileges {
	bool netAdmin = false; // CAP_NET_ADMIN in the effective set (of its own user namespace)
	// Whether that user namespace's capabilities reach this network namespace (it owns it,
	// or is an ancestor of its owner): nullopt when the kernel would not say.
	std::optional<bool> reachesNetworkNamespace;
};

// The calling process's, from capget() and the owner of /proc/self/ns/net (NS_GET_USERNS).
Privileges currentPrivileges();

// For EPERM and EACCES: what the answer means for a process with `privileges`, e.g. "the
// agent lacks CAP_NET_ADMIN, which ...". Empty for any other errno.
std::string refusalReason(int errnum, const Privileges &privileges);

// `error` with the kernel's answer named ("EPERM") and refusalReason() appended; any other
// errno leaves it as it is. The first form looks at the process's privileges only then.
Error explainRefusal(Error error);
Error explainRefusal(Error error, const Privileges &privileges);

// ctnetlink answers from within our own recv(), in microseconds, and builds each datagram
// of a dump there: a kernel that does not answer within a second is stuck, not busy. The
// daemon's loop then loses one second, far inside its liveness limit, instead of the
// socket's default ten.
inline constexpr std::chrono::milliseconds kConntrackReplyTimeout{1000};

// A failed read of conntrack (`what`: "conntrack statistics") over ctnetlink, in words an
// operator can act on: a refusal explained as above, a kernel without ctnetlink
// (nf_conntrack_netlink; EINVAL, EOPNOTSUPP) and no answer within kConntrackReplyTimeout.
Error explainConntrackError(const Error &error, std::string_view what);

} // namespace ipmasq::netlink
