// SPDX-License-Identifier: Apache-2.0
// Fuzz target: rtnetlink messages -> parseRouteMessage -> SelectedRoutes.
// Input: a stream of records, each a control byte (bit 0: a delete, bit 1: NLM_F_REPLACE,
// bit 2: a link going down, bit 3: a reading anew), a length byte, and that many bytes of
// one message after its netlink header (an rtmsg and attributes, as the kernel sends them).
// Invariants: the parse reads nothing outside the message; a parsed route has a prefix
// within its family, without host bits, and at most kMaxRouteHops hops; the selection stays
// within its bound, keeps only routes inside `within`, and its changes add up to its size.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>

#include "fuzz_support.h"
#include "ip-masq-agent/node/route_source.h"

using namespace ipmasq;

namespace {

constexpr size_t kBound = 64;

RouteFilter filter()
{
	RouteFilter f;
	f.protocols = {RouteProtocol{12}, RouteProtocol{2}};
	f.interfaces = {InterfacePattern{"cali", true, {}}};
	f.within = {builtinPrefix("10.244.0.0/16"), builtinPrefix("fd00::/8")};
	f.ipv6 = true;
	return f;
}

bool inside(const Prefix &prefix)
{
	for (const Prefix &outer : filter().within)
		if (prefix.network.family == outer.network.family && outer.first() <= prefix.first() &&
		    prefix.last() <= outer.last() && outer.length <= prefix.length)
			return true;
	return false;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	SelectedRoutes routes(filter(), kBound);
	RouteUpdate setup;
	(void)routes.setLink(7, "cali0", true, setup);
	int64_t balance = 0;
	for (size_t at = 0; at + 2 <= size;) {
		const uint8_t control = data[at];
		const size_t length = std::min<size_t>(data[at + 1], size - at - 2);
		// The message in an aligned buffer, with its own length, as recv() leaves it.
		std::vector<uint32_t> buffer((MNL_NLMSG_HDRLEN + length) / 4 + 1, 0);
		auto *nlh = reinterpret_cast<nlmsghdr *>(buffer.data());
		nlh->nlmsg_len = static_cast<uint32_t>(MNL_NLMSG_HDRLEN + length);
		nlh->nlmsg_type = control & 1 ? RTM_DELROUTE : RTM_NEWROUTE;
		std::memcpy(reinterpret_cast<char *>(buffer.data()) + MNL_NLMSG_HDRLEN, data + at + 2, length);
		at += 2 + length;

		RouteUpdate update;
		if (control & 4)
			(void)routes.setLink(7, "cali0", false, update);
		if (const auto route = parseRouteMessage(nlh)) {
			const unsigned bits = familyBits(route->destination.network.family);
			fuzz::check(route->destination.length <= bits, "a prefix longer than its family");
			fuzz::check(parsePrefix(route->destination.toString()).has_value(), "a prefix with host bits",
				    route->destination.toString());
			fuzz::check(route->nextHops.size() <= kMaxRouteHops, "more hops than the bound");
			if (control & 8) {
				SelectedRoutes fresh(filter(), kBound);
				(void)fresh.setLink(7, "cali0", true, update);
				(void)fresh.offer(*route, update);
				routes.takeRoutesOf(fresh, update);
			} else {
				(void)routes.apply(*route, control & 1, control & 2, update);
			}
		}
		for (const RouteChange &change : update.changes) {
			balance += change.added ? 1 : -1;
			fuzz::check(inside(change.route.destination), "a route outside within kept",
				    change.route.origin());
			fuzz::checkOneLine(change.route.origin());
		}
		fuzz::check(routes.size() <= kBound, "more routes than the bound");
		fuzz::check(balance == static_cast<int64_t>(routes.size()), "changes do not add up to the routes");
	}
	return 0;
}
