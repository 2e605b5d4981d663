// SPDX-License-Identifier: Apache-2.0
// EPERM and EACCES from netlink, told apart by what the process holds.
#include "ip-masq-agent/netlink/refusal.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/unique_fd.h"

namespace ipmasq::netlink {

namespace {

bool hasNetAdmin()
{
	__user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
	__user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
	// glibc has no wrapper; the raw call is what libcap makes.
	if (syscall(SYS_capget, &header, data) != 0)
		return false;
	return data[CAP_NET_ADMIN / 32].effective & (1u << (CAP_NET_ADMIN % 32));
}

// NS_GET_USERNS hands back the owning user namespace when it is ours or one below it,
// where our capabilities apply; EPERM when it lies outside our scope (an ancestor),
// where they do not.
std::optional<bool> capabilitiesReachNetworkNamespace()
{
	const UniqueFd net(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
	if (!net.isValid())
		return std::nullopt;
	const UniqueFd owner(ioctl(net.get(), NS_GET_USERNS));
	if (owner.isValid())
		return true;
	if (errno == EPERM)
		return false;
	return std::nullopt;
}

} // namespace

Privileges currentPrivileges()
{
	return Privileges{hasNetAdmin(), capabilitiesReachNetworkNamespace()};
}

std::string refusalReason(int errnum, const Privileges &privileges)
{
	if (errnum == EACCES)
		return "a security module (SELinux, AppArmor or a BPF LSM) denied it, whatever the "
		       "agent's capabilities: look for the denial in the audit or kernel log";
	if (errnum != EPERM)
		return {};
	if (!privileges.netAdmin)
		return "the agent lacks CAP_NET_ADMIN, which nfnetlink requires in the user namespace "
		       "that owns this network namespace: run it as root, or grant the capability";
	if (privileges.reachesNetworkNamespace == false)
		return "the agent has CAP_NET_ADMIN, but only in a user namespace of its own, which "
		       "does not own this network namespace; nfnetlink requires it in the owner's: "
		       "run the agent in the node's user namespace (not a user-namespaced container)";
	return "the agent has CAP_NET_ADMIN where nfnetlink requires it, so something other "
	       "than capabilities refused the request: a seccomp filter, or a security module "
	       "(AppArmor, SELinux, a BPF LSM); look for the denial in the audit or kernel log";
}

Error explainRefusal(Error error)
{
	if (error.errnum != EPERM && error.errnum != EACCES)
		return error;
	return explainRefusal(std::move(error), currentPrivileges());
}

Error explainRefusal(Error error, const Privileges &privileges)
{
	const std::string reason = refusalReason(error.errnum, privileges);
	if (reason.empty())
		return error;
	const char *name = strerrorname_np(error.errnum);
	error.message += fmt::format(" (the kernel answered {}: {})", name ? name : "?", reason);
	return error;
}

Error explainConntrackError(const Error &error, std::string_view what)
{
	const std::string context = fmt::format("cannot read {}: ", what);
	switch (error.errnum) {
	case EPERM: // not always a missing capability: see refusalReason()
	case EACCES:
		return explainRefusal(error.withContext(context));
	case EINVAL: // nfnetlink's answer for a subsystem or request it does not have
	case EOPNOTSUPP:
		return Error(context + "this kernel has no conntrack netlink interface "
				       "(nf_conntrack_netlink) (" + error.message + ")",
			     error.errnum);
	case ETIMEDOUT:
		return Error(fmt::format("{}ctnetlink did not answer within {} ms", context,
					 kConntrackReplyTimeout.count()),
			     error.errnum);
	default:
		return error.withContext(context);
	}
}

} // namespace ipmasq::netlink
