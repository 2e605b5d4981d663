// SPDX-License-Identifier: Apache-2.0
// The SNAT guard's over sets read back: who went over which limit toward which destination,
// and how often (each element's counter).
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

struct Collector {
	KeyLayout layout;
	GuardLimitKind kind;
	std::vector<GuardOverKey> *out;
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
		collector->out->push_back(over);
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

} // namespace

Result<std::vector<GuardOverKey>> NetlinkBackend::readGuardOver(const std::string &table,
								const std::vector<DynamicSet> &sets)
{
	std::vector<GuardOverKey> out;
	for (const DynamicSet &set : sets) {
		const std::optional<GuardLimitKind> kind = overSetKind(set);
		if (!kind || !set.counter)
			continue;
		Collector collector{{set.family, familyBits(set.family) / 8}, *kind, &out};
		// The set's size bounds what one dump brings (the kernel adds no element past it).
		const Status read = netlink::dumpSetElements(socket_, table, set.name, [&collector](const nftnl_set *part) -> Status {
			if (nftnl_set_elem_foreach(const_cast<nftnl_set *>(part), collectOver, &collector) < 0)
				return fail("out of memory reading set elements", ENOMEM);
			return {};
		});
		if (!read) {
			if (read.error().errnum == ENOENT)
				continue; // not in the table (yet): nothing over
			return fail(read.error().withContext(
				fmt::format("reading set {} of table inet {}: ", set.name, table)));
		}
	}
	return out;
}

Result<std::vector<DynamicSetFill>> NetlinkBackend::readDynamicSetFill(const std::string &table,
									const std::vector<DynamicSet> &sets)
{
	std::vector<DynamicSetFill> out;
	for (const DynamicSet &set : sets) {
		DynamicSetFill fill{set.name, 0, set.size};
		const Status read = netlink::dumpSetElements(socket_, table, set.name, [&fill](const nftnl_set *part) -> Status {
			const auto count = [](nftnl_set_elem *, void *data) -> int {
				++*static_cast<size_t *>(data);
				return 0;
			};
			(void)nftnl_set_elem_foreach(const_cast<nftnl_set *>(part), count, &fill.elements);
			return {};
		});
		if (!read) {
			if (read.error().errnum == ENOENT)
				continue;
			return fail(read.error().withContext(
				fmt::format("reading set {} of table inet {}: ", set.name, table)));
		}
		out.push_back(fill);
	}
	return out;
}

} // namespace ipmasq
