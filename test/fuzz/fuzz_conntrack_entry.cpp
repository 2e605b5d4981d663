// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the ctnetlink entry parser (netlink/conntrack_dump.h) on arbitrary bytes,
// which become one message of a dump (its length set to theirs, its type an entry's), and
// the SNAT usage counter on whatever it parses. The parser reads nothing outside the
// message (ASan), accepts or refuses the same bytes the same way twice, errors are one
// line; a parsed entry's addresses have the message's family; the counter's figures add
// up (the holders' too) and stay within its bounds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>

#include "fuzz_support.h"
#include "ip-masq-agent/conntrack/conntrack_dump.h"
#include "ip-masq-agent/conntrack/snat_usage.h"

using namespace ipmasq;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	// The bytes after the netlink header, in a buffer of exactly that size (ASan sees
	// any read past it); the first one picks the plan.
	if (size < 1)
		return 0;
	const uint8_t choice = data[0];
	std::vector<uint8_t> message(NLMSG_HDRLEN + size - 1);
	auto *nlh = reinterpret_cast<nlmsghdr *>(message.data());
	nlh->nlmsg_len = static_cast<uint32_t>(message.size());
	nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
	if (size > 1)
		std::memcpy(message.data() + NLMSG_HDRLEN, data + 1, size - 1);

	auto entry = netlink::parseConntrackEntry(nlh);
	auto again = netlink::parseConntrackEntry(nlh);
	fuzz::check(bool(entry) == bool(again), "the same message parsed twice differs");
	if (!entry) {
		fuzz::checkOneLine(entry.error().message);
		return 0;
	}
	if (!*entry)
		return 0;
	const ConntrackEntry &e = **entry;
	fuzz::check(e.originalSource.family == e.family && e.destination.family == e.family &&
			    e.translatedSource.family == e.family,
		    "an address of another family than the message's");

	SnatPlan plan;
	SnatFamilyPlan family;
	if (choice & 1)
		family.toPorts = {{static_cast<uint16_t>(1 + (choice >> 4)), 40099}};
	if (choice & 2)
		family.to = AddressRange{e.translatedSource, e.translatedSource};
	(e.family == Family::ipv4 ? plan.ipv4 : plan.ipv6) = family;
	SnatUsageCounter::Limits limits;
	limits.maxDestinations = 1;
	limits.maxOtherDestinations = 1;
	limits.top = 1;
	limits.maxClientPairs = 1;
	limits.topClients = 1;
	SnatUsageCounter counter(plan, std::nullopt, limits);
	for (int i = 0; i < 3; i++)
		counter.add(e);
	const SnatUsage usage = counter.finish();
	fuzz::check(usage.entriesRead == 3, "an entry not counted as read");
	fuzz::check(usage.connections + usage.otherConnections == (e.sourceNat ? 3u : 0u),
		    "a source-NATed entry counted neither as the agent's nor as another's");
	fuzz::check(usage.destinations <= 1 && usage.top.size() <= 1 && usage.otherTop.size() <= 1,
		    "a bound exceeded");
	for (const SnatDestination &d : usage.top) {
		fuzz::check(d.connections == 3 && d.available() > 0 && d.ratio() > 0,
			    "the agent's destination has no ports or no connections");
		fuzz::check(d.pool.contains(e.translatedPort), "a port outside the pool counted");
	}
	for (const SnatDestinationTotal &t : usage.totals) {
		uint64_t held = 0;
		for (const SnatClient &c : t.holders.top)
			held += c.held.total();
		fuzz::check(t.holders.top.size() <= 1 && t.holders.clients <= 1, "a bound of the holders exceeded");
		fuzz::check(held + t.holders.connectionsLeftOut + t.holders.unattributed == t.connections,
			    "the holders' connections do not add up to the destination's");
	}
	fuzz::checkOneLine(snatUsageClause(usage));
	return 0;
}
