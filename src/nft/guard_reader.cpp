// SPDX-License-Identifier: Apache-2.0
// The SNAT guard's sets read back: who went over which limit toward which destination, and
// how often (each over set element's counter); how many keys each set holds.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>
#include <libnftnl/expr.h>
#include <libnftnl/set.h>

#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/nft/table_read.h"

namespace ipmasq {

namespace {

// Where the key's parts lie, as the guard's rules load them into 32-bit registers: source,
// destination, l4proto (its first byte), destination port (its first two, network order).
struct KeyLayout {
	Family family;
	size_t addressBytes;
	size_t length() const { return 2 * addressBytes + 8; }
};

// Whether `a` comes before `b` in what the guard reports: the most attempts first, then by
// source and destination, so that the keys kept at a bound are the same every read.
bool moreAttempts(const GuardOverKey &a, const GuardOverKey &b)
{
	if (a.attempts != b.attempts)
		return a.attempts > b.attempts;
	if (a.source != b.source)
		return a.source < b.source;
	if (a.destination != b.destination)
		return a.destination < b.destination;
	return a.protocol != b.protocol ? a.protocol < b.protocol : a.port < b.port;
}

// One over set's walk: every element counted, and the `top` keys with the most attempts
// kept in `kept`, a heap whose first key is the one the next better key replaces. The
// daemon keeps a few per set where the set may hold 65,536 (their vector, 4 MB a set).
struct Collector {
	KeyLayout layout;
	GuardLimitKind kind;
	size_t top;
	std::vector<GuardOverKey> kept = {};
	size_t elements = 0;

	void keep(const GuardOverKey &over)
	{
		if (kept.size() < top) {
			kept.push_back(over);
			std::push_heap(kept.begin(), kept.end(), moreAttempts);
		} else if (top > 0 && moreAttempts(over, kept.front())) {
			std::pop_heap(kept.begin(), kept.end(), moreAttempts);
			kept.back() = over;
			std::push_heap(kept.begin(), kept.end(), moreAttempts);
		}
	}
};

int addCounterPackets(nftnl_expr *expr, void *data)
{
	const char *name = nftnl_expr_get_str(expr, NFTNL_EXPR_NAME);
	if (name && std::strcmp(name, "counter") == 0)
		*static_cast<uint64_t *>(data) += nftnl_expr_get_u64(expr, NFTNL_EXPR_CTR_PACKETS);
	return 0;
}

// A C callback: nothing may be thrown through it.
int collectOver(nftnl_set_elem *elem, void *data)
{
	auto *collector = static_cast<Collector *>(data);
	try {
		collector->elements++;
		uint32_t length = 0;
		const auto *key = static_cast<const uint8_t *>(nftnl_set_elem_get(elem, NFTNL_SET_ELEM_KEY, &length));
		const KeyLayout &layout = collector->layout;
		if (!key || length != layout.length())
			return 0; // not a key the guard's rules make: skipped
		GuardOverKey over;
		over.kind = collector->kind;
		over.source = Address::fromBytes(layout.family, key);
		over.destination = Address::fromBytes(layout.family, key + layout.addressBytes);
		over.protocol = key[2 * layout.addressBytes];
		over.port = static_cast<uint16_t>(key[2 * layout.addressBytes + 4] << 8 | key[2 * layout.addressBytes + 5]);
		(void)nftnl_set_elem_expr_foreach(elem, addCounterPackets, &over.attempts);
		collector->keep(over);
		return 0;
	} catch (...) {
		return -1;
	}
}

// The limit whose over set `name` is, in `family`; nullopt for another set.
std::optional<GuardLimitKind> overSetKind(const DynamicSet &set)
{
	for (const GuardLimitKind kind : {GuardLimitKind::newConnections, GuardLimitKind::openConnections})
		if (set.name == guardOverSetName(kind, set.family))
			return kind;
	return std::nullopt;
}

// Walks over set `set` of inet `table` into `collector`; ENOENT when the table lacks it.
Status walkOverSet(netlink::Socket &socket, const std::string &table, const DynamicSet &set, Collector &collector)
{
	return netlink::dumpSetElements(socket, table, set.name, [&collector](const nftnl_set *part) -> Status {
		if (nftnl_set_elem_foreach(const_cast<nftnl_set *>(part), collectOver, &collector) < 0)
			return fail("out of memory reading set elements", ENOMEM);
		return {};
	});
}

Error readError(const Error &error, const std::string &table, const std::string &set)
{
	return error.withContext(fmt::format("reading set {} of table inet {}: ", set, table));
}

} // namespace

Result<std::vector<GuardOverKey>> NetlinkBackend::readGuardOver(const std::string &table,
								const std::vector<DynamicSet> &sets)
{
	std::vector<GuardOverKey> out;
	for (const DynamicSet &set : sets) {
		const std::optional<GuardLimitKind> kind = overSetKind(set);
		if (!kind || !set.counter)
			continue;
		// Every key: the set's size bounds what one dump brings (the kernel adds no
		// element past it).
		Collector collector{{set.family, familyBits(set.family) / 8}, *kind, set.size};
		if (const Status read = walkOverSet(socket_, table, set, collector); !read) {
			if (read.error().errnum == ENOENT)
				continue; // not in the table (yet): nothing over
			return fail(readError(read.error(), table, set.name));
		}
		out.insert(out.end(), collector.kept.begin(), collector.kept.end());
	}
	return out;
}

Result<GuardReading> NetlinkBackend::readGuard(const std::string &table, const std::vector<DynamicSet> &sets,
					       size_t top)
{
	GuardReading out;
	for (const DynamicSet &set : sets) {
		DynamicSetFill fill{set.name, 0, set.size};
		const std::optional<GuardLimitKind> kind = overSetKind(set);
		Status read;
		if (kind && set.counter) {
			// One dump: the keys over and the count come from the same walk.
			Collector collector{{set.family, familyBits(set.family) / 8}, *kind, top};
			read = walkOverSet(socket_, table, set, collector);
			fill.elements = collector.elements;
			std::sort(collector.kept.begin(), collector.kept.end(), moreAttempts);
			out.over.insert(out.over.end(), collector.kept.begin(), collector.kept.end());
		} else {
			// Only counted: each reply's elements without a libnftnl object each.
			auto counted = netlink::countSetElements(socket_, table, set.name);
			if (counted)
				fill.elements = *counted;
			else
				read = fail(counted.error());
		}
		if (!read) {
			if (read.error().errnum == ENOENT)
				continue; // not in the table (yet): left out
			return fail(readError(read.error(), table, set.name));
		}
		out.fill.push_back(fill);
	}
	return out;
}

} // namespace ipmasq
