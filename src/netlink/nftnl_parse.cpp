// SPDX-License-Identifier: Apache-2.0
// Reading what libnftnl parsed from the kernel.
#include "ip-masq-agent/netlink/nftnl_parse.h"

#include <cerrno>
#include <cstring>
#include <optional>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>
#include <libnftnl/gen.h>

#include "ip-masq-agent/netlink/handles.h"
#include "ip-masq-agent/netlink/socket.h"

namespace ipmasq::netlink {

const nftnl_udata *userdataAttribute(const void *data, uint32_t len, uint8_t type)
{
	if (!data || len == 0)
		return nullptr;
	struct Found {
		uint8_t type;
		const nftnl_udata *attribute = nullptr;
	} found{type};
	const auto collect = [](const nftnl_udata *attr, void *out) -> int {
		auto *f = static_cast<Found *>(out);
		if (nftnl_udata_type(attr) == f->type)
			f->attribute = attr;
		return 0;
	};
	return nftnl_udata_parse(data, len, collect, &found) < 0 ? nullptr : found.attribute;
}

std::string userdataComment(const void *data, uint32_t len, uint8_t commentType)
{
	const nftnl_udata *comment = userdataAttribute(data, len, commentType);
	if (!comment)
		return {};
	// nft stores the comment with its NUL; keep to the bytes before it.
	const auto *text = static_cast<const char *>(nftnl_udata_get(comment));
	return std::string(text, strnlen(text, nftnl_udata_len(comment)));
}

uint32_t userdataU32(const void *data, uint32_t len, uint8_t type)
{
	const nftnl_udata *value = userdataAttribute(data, len, type);
	return value && nftnl_udata_len(value) == sizeof(uint32_t) ? nftnl_udata_get_u32(value) : 0;
}

std::string stringOf(const char *value)
{
	return value ? value : "";
}

Status parsed(int ret, const char *what)
{
	if (ret < 0)
		return fail(fmt::format("cannot parse the kernel's {} message", what), EPROTO);
	return {};
}

Result<uint32_t> rulesetGeneration(Socket &socket)
{
	std::optional<uint32_t> id;
	Status s = socket.query(NFT_MSG_GETGEN, NFPROTO_UNSPEC, 0, nullptr, [&id](const nlmsghdr *nlh) -> Status {
		GenPtr gen = newGen();
		if (auto p = parsed(nftnl_gen_nlmsg_parse(nlh, gen.get()), "generation"); !p)
			return p;
		id = nftnl_gen_get_u32(gen.get(), NFTNL_GEN_ID);
		return {};
	});
	if (!s)
		return fail(s.error().withContext("reading the ruleset generation: "));
	if (!id)
		return fail("reading the ruleset generation: the kernel sent none", EPROTO);
	return *id;
}

} // namespace ipmasq::netlink
