// SPDX-License-Identifier: Apache-2.0
// Each statement kind's print in one place, as nft's statement.c keeps it in its stmt_ops
// (read, not copied): a table by kind, which a dynset's own statements print through too.
// iptables-nft's matches and targets print as libxtables translates them, where the
// printer knows the translation.
#include <cstring>

#include <netinet/in.h> // before the kernel's headers, which then leave in_addr alone

#include <linux/netfilter/nf_log.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_synproxy.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/xt_addrtype.h>

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/rule_text_parts.h"

namespace ipmasq::nft::text {

namespace {

// nft's get_rate: bytes as the largest unit that divides them.
std::string rateText(uint64_t bytes)
{
	static constexpr const char *kUnits[] = {"bytes", "kbytes", "mbytes"};
	size_t unit = 0;
	for (; bytes && unit + 1 < std::size(kUnits) && bytes % 1024 == 0; unit++)
		bytes /= 1024;
	return fmt::format("{} {}", bytes, kUnits[unit]);
}

std::string operandText(const Output &o, const Stmt &s, size_t i)
{
	return i < s.operands.size() ? o.tree.print(s.operands[i]) : unknownText("register");
}

// ---- Each kind's print (nft's *_stmt_print), in StmtType's order ----

std::string printCounter(const Output &o, const Stmt &s)
{
	if (o.stateless)
		return "counter";
	const auto *c = std::get_if<CounterStatement>(s.source);
	return fmt::format("counter packets {} bytes {}", c ? c->packets : 0, c ? c->bytes : 0);
}

// A write of a payload field or of an extension header's (nft post-processes neither side
// of the latter); an option without a value is stripped.
std::string printWrite(const Output &o, const Stmt &s)
{
	if (s.value == kNone)
		return "reset " + o.tree.print(s.expr);
	return o.tree.print(s.expr) + " set " + o.tree.print(s.value);
}

std::string printMeta(const Output &o, const Stmt &s)
{
	const uint32_t key = std::get<SetMeta>(*s.source).key;
	const char *name = metaKey(key).name;
	return fmt::format("{}{} set {}", metaUnqualified(key) ? "" : "meta ", name ? name : unknownText("meta key"),
			   o.tree.print(s.expr));
}

std::string printCt(const Output &o, const Stmt &s)
{
	const SetCt &c = std::get<SetCt>(*s.source);
	const char *name = ctKey(c.key, false).name;
	const char *dir = !c.direction ? "" : *c.direction == 0 ? "original " : "reply ";
	return fmt::format("ct {}{} set {}", dir, name ? name : unknownText("ct key"), o.tree.print(s.expr));
}

std::string natFlagsText(uint32_t flags)
{
	std::string out;
	for (const auto &[flag, name] : {std::pair{NF_NAT_RANGE_PROTO_RANDOM, "random"},
					 {NF_NAT_RANGE_PROTO_RANDOM_FULLY, "fully-random"}, {NF_NAT_RANGE_PERSISTENT, "persistent"}})
		if (flags & flag)
			out += (out.empty() ? " " : ",") + std::string(name);
	return out;
}

// nft's nat_stmt_print: `snat ip prefix to 10.0.0.0/8:80-90 random,persistent`.
std::string printNat(const Output &o, const Stmt &s)
{
	static constexpr const char *kNames[] = {"masquerade", "snat", "dnat", "redirect"};
	const NatStatement &n = std::get<NatStatement>(*s.source);
	if (n.xtNetmap)
		return "xt target NETMAP"; // nft 1.0.6 has no translation for it
	std::string out = kNames[size_t(n.kind)];
	if (s.expr != kNone || s.value != kNone) {
		if (n.family && s.natFamily)
			out += *n.family == Family::ipv4 ? " ip" : " ip6";
		if (n.flags & NF_NAT_RANGE_NETMAP)
			out += " prefix";
		out += " to";
	}
	if (s.expr != kNone) {
		const Node &addr = o.tree.at(s.expr);
		const bool ip6 = addr.type == Type::ip6addr;
		if (s.value != kNone && ip6 && addr.kind == Kind::value)
			out += " [" + o.tree.print(s.expr) + "]";
		else if (s.value != kNone && addr.kind == Kind::range && o.tree.at(addr.a).type == Type::ip6addr)
			out += " [" + o.tree.print(addr.a) + "]-[" + o.tree.print(addr.b) + "]";
		else
			out += " " + o.tree.print(s.expr);
	}
	if (s.value != kNone)
		out += (s.expr == kNone ? " :" : ":") + o.tree.print(s.value);
	return out + natFlagsText(n.flags);
}

// iptables' addrtype match as nft (with libxtables) translates it: one of the two types
// (the source when both are given).
std::string printAddrtype(const Output &, const Stmt &s)
{
	const AddressTypeMatch &m = std::get<AddressTypeMatch>(*s.source);
	const bool source = m.source != 0;
	const uint16_t types = source ? m.source : m.destination;
	std::vector<std::string> names;
	for (uint32_t t = 0; t < 12; t++)
		if (types & (1u << t))
			names.push_back(integerText(Type::fibAddr, t, 32));
	const std::string list = names.size() == 1 ? names[0] : "{ " + fmt::format("{}", fmt::join(names, ", ")) + " }";
	const char *iface = (m.limitInterface & XT_ADDRTYPE_LIMIT_IFACE_OUT)  ? " . oif"
			    : (m.limitInterface & XT_ADDRTYPE_LIMIT_IFACE_IN) ? " . iif" : "";
	return fmt::format("fib {}{} type {}{}", source ? "saddr" : "daddr", iface,
			   (source ? m.invertSource : m.invertDestination) ? "!= " : "", list);
}

// iptables' MARK target as nft (with libxtables) translates --set/--and/--or/--xor-mark.
std::string printMark(const Output &, const Stmt &s)
{
	const XtMark &m = std::get<XtMark>(*s.source);
	if (m.mask == 0xffffffff)
		return fmt::format("meta mark set {:#x}", m.value);
	if (m.value == 0)
		return fmt::format("meta mark set mark and {:#x}", ~m.mask);
	if (m.value == m.mask)
		return fmt::format("meta mark set mark or {:#x}", m.value);
	if (m.mask == 0)
		return fmt::format("meta mark set mark xor {:#x}", m.value);
	return fmt::format("meta mark set mark and {:#x} xor {:#x}", ~m.mask, m.value);
}

std::string printLog(const Output &, const Stmt &s)
{
	static constexpr const char *kLevels[] = {"emerg", "alert", "crit", "err", "warn", "notice", "info", "debug", "audit"};
	const Log &l = std::get<Log>(*s.expression);
	std::string out = "log";
	if (l.prefix)
		out += fmt::format(" prefix \"{}\"", printable(*l.prefix));
	if (l.group)
		out += fmt::format(" group {}", *l.group);
	if (l.snaplen)
		out += fmt::format(" snaplen {}", *l.snaplen);
	if (l.queueThreshold)
		out += fmt::format(" queue-threshold {}", *l.queueThreshold);
	if (l.level && *l.level != 4) // LOG_WARNING, the default
		out += fmt::format(" level {}", *l.level < std::size(kLevels) ? kLevels[*l.level] : "unknown");
	const uint32_t flags = l.flags.value_or(0);
	if ((flags & NF_LOG_MASK) == NF_LOG_MASK)
		return out + " flags all";
	if (flags & (NF_LOG_TCPSEQ | NF_LOG_TCPOPT))
		out += std::string(" flags tcp") + ((flags & NF_LOG_TCPSEQ) ? " sequence" : "") +
		       ((flags & NF_LOG_TCPOPT) ? ((flags & NF_LOG_TCPSEQ) ? ",options" : " options") : "");
	for (const auto &[flag, text] : {std::pair{NF_LOG_IPOPT, " flags ip options"}, {NF_LOG_UID, " flags skuid"},
					 {NF_LOG_MACDECODE, " flags ether"}})
		if (flags & flag)
			out += text;
	return out;
}

std::string printLimit(const Output &, const Stmt &s)
{
	const Limit &l = std::get<Limit>(*s.expression);
	const char *unit = l.unit == 1 ? "second" : l.unit == 60 ? "minute" : l.unit == 3600 ? "hour"
			   : l.unit == 86400 ? "day" : l.unit == 604800 ? "week" : "error";
	const char *over = (l.flags & NFT_LIMIT_F_INV) ? "over " : "";
	if (l.type == NFT_LIMIT_PKTS)
		return fmt::format("limit rate {}{}/{}", over, l.rate, unit) +
		       (l.burst && l.burst != 5 ? fmt::format(" burst {} packets", l.burst) : "");
	return fmt::format("limit rate {}{}/{}", over, rateText(l.rate), unit) +
	       (l.burst ? fmt::format(" burst {}", rateText(l.burst)) : "");
}

std::string printQuota(const Output &o, const Stmt &s)
{
	const Quota &q = std::get<Quota>(*s.expression);
	return fmt::format("quota {}{}", (q.flags & NFT_QUOTA_F_INV) ? "over " : "", rateText(q.bytes)) +
	       (!o.stateless && q.consumed ? " used " + rateText(q.consumed) : "");
}

// nft's objref_stmt_print: `counter name "c"`, `ct helper set "ftp"`, or by a map.
std::string printObjref(const Output &o, const Stmt &s)
{
	static constexpr const char *kTypes[] = {"unknown", "counter", "quota", "ct helper", "limit", "ct timeout",
						 "secmark", "ct expectation", "synproxy"};
	const Objref &r = std::get<Objref>(*s.expression);
	const Set *set = r.set ? o.table.findSet(*r.set) : nullptr;
	const uint32_t type = set ? set->objectType : r.type;
	std::string verb;
	switch (type) {
	case NFT_OBJECT_CT_HELPER: verb = "ct helper set "; break;
	case NFT_OBJECT_CT_TIMEOUT: verb = "ct timeout set "; break;
	case NFT_OBJECT_CT_EXPECT: verb = "ct expectation set "; break;
	case NFT_OBJECT_SECMARK: verb = "meta secmark set "; break;
	default: verb = fmt::format("{} name ", type < std::size(kTypes) ? kTypes[type] : "unknown"); break;
	}
	if (!r.set)
		return fmt::format("{}\"{}\"", verb, printable(r.name.value_or("")));
	if (s.value == kNone)
		return verb + unknownText("register");
	return fmt::format("{}{} map {}", verb, o.tree.print(s.operands[0]), o.tree.print(s.value));
}

// nft's set_stmt_print, map_stmt_print and meter_stmt_print: `add @s { ip saddr timeout 1s
// limit rate 10/second }`, the set's own statements printed statelessly.
std::string printDynset(const Output &o, const Stmt &s)
{
	static constexpr const char *kOps[] = {"add", "update", "delete"};
	const Dynset &d = std::get<Dynset>(*s.expression);
	const Set *set = o.table.findSet(d.set);
	const bool anonymous = set && (set->flags & NFT_SET_ANONYMOUS);
	// nft's meter: an anonymous set a key and its statements are added to.
	const bool meter = anonymous && s.operands.size() == 1 && !d.statements.empty();
	if (s.operands.empty() || (anonymous && !meter))
		return unknownText("dynset");
	std::string out = meter ? fmt::format("meter {} size {} {{ {}", printable(d.set), set->declaredSize,
					      o.tree.print(s.operands[0]))
				: fmt::format("{} @{} {{ {}", d.op < std::size(kOps) ? kOps[d.op] : "unknown",
					      printable(d.set), o.tree.print(s.operands[0]));
	if (d.timeout.value_or(0) != 0)
		out += " timeout " + integerText(Type::time, *d.timeout, 64);
	const Output stateless{o.tree, o.table, true};
	for (const Stmt &own : s.nested)
		out += fmt::format(" {}", printStatement(stateless, own));
	if (s.operands.size() > 1)
		out += " : " + o.tree.print(s.operands[1]);
	return out + " }";
}

std::string printDup(const Output &o, const Stmt &s)
{
	if (s.operands.empty())
		return "dup";
	return "dup to " + operandText(o, s, 0) + (s.operands.size() > 1 ? " device " + operandText(o, s, 1) : "");
}

std::string printQueue(const Output &o, const Stmt &s)
{
	const Queue &q = std::get<Queue>(*s.expression);
	std::string out = "queue";
	if (q.flags & NFT_QUEUE_FLAG_BYPASS)
		out += " flags bypass";
	if (q.flags & NFT_QUEUE_FLAG_CPU_FANOUT)
		out += (q.flags & NFT_QUEUE_FLAG_BYPASS) ? ",fanout" : " flags fanout";
	if (!s.operands.empty())
		return out + " to " + operandText(o, s, 0);
	return out + " to " + (q.total > 1 ? fmt::format("{}-{}", q.number, q.number + q.total - 1) : std::to_string(q.number));
}

std::string printSynproxy(const Output &, const Stmt &s)
{
	const Synproxy &p = std::get<Synproxy>(*s.expression);
	std::string out = "synproxy";
	if (p.flags & NF_SYNPROXY_OPT_MSS)
		out += fmt::format(" mss {}", p.mss);
	if (p.flags & NF_SYNPROXY_OPT_WSCALE)
		out += fmt::format(" wscale {}", p.wscale);
	return out + ((p.flags & NF_SYNPROXY_OPT_TIMESTAMP) ? " timestamp" : "") +
	       ((p.flags & NF_SYNPROXY_OPT_SACK_PERM) ? " sack-perm" : "");
}

// An iptables match as nft lists it through libxtables' translation: a comment prints
// nothing, -m statistic as nft's own random or numgen match; what is not translated here
// is marked unknown.
std::string printXtMatch(const Output &, const Stmt &s)
{
	const Match &m = std::get<Match>(*s.expression);
	const auto u32At = [&m](size_t at) {
		uint32_t v = 0;
		std::memcpy(&v, m.info.data() + at, sizeof(v));
		return v;
	};
	if (m.name == "comment")
		return {};
	// xt_statistic_info { u16 mode, flags; union { u32 probability; u32 every, packet; } }
	if (m.name == "statistic" && m.info.size() >= 16) {
		uint16_t mode = 0, flags = 0;
		std::memcpy(&mode, m.info.data(), 2);
		std::memcpy(&flags, m.info.data() + 2, 2);
		const bool invert = flags & 1;
		if (mode == 0)
			return fmt::format("meta random & 2147483647 {} {}", invert ? ">=" : "<", u32At(4));
		if (mode == 1)
			return fmt::format("numgen inc mod {} {}{}", u32At(4) + 1, invert ? "!= " : "", u32At(8));
	}
	return unknownText("xt match " + printable(m.name));
}

// nft's stmt_ops, by type: each kind's print.
using Print = std::string (*)(const Output &, const Stmt &);
constexpr std::pair<StmtType, Print> kStatements[] = {
	{StmtType::expression, [](const Output &o, const Stmt &s) { return o.tree.print(s.expr); }},
	{StmtType::verdict, [](const Output &, const Stmt &s) { return verdictText(std::get<SetVerdict>(*s.source).verdict); }},
	{StmtType::counter, printCounter},
	{StmtType::payload, printWrite},
	{StmtType::exthdr, printWrite},
	{StmtType::meta, printMeta},
	{StmtType::ct, printCt},
	{StmtType::nat, printNat},
	{StmtType::addrtype, printAddrtype},
	{StmtType::mark, printMark},
	{StmtType::log, printLog},
	{StmtType::limit, printLimit},
	{StmtType::quota, printQuota},
	{StmtType::connlimit,
	 [](const Output &, const Stmt &s) {
		 const Connlimit &c = std::get<Connlimit>(*s.expression);
		 return fmt::format("ct count {}{}", c.flags ? "over " : "", c.count);
	 }},
	{StmtType::notrack, [](const Output &, const Stmt &) { return std::string("notrack"); }},
	{StmtType::flowOffload,
	 [](const Output &, const Stmt &s) { return "flow add @" + printable(std::get<FlowOffload>(*s.expression).table); }},
	{StmtType::objref, printObjref},
	{StmtType::dynset, printDynset},
	{StmtType::dup, printDup},
	{StmtType::queue, printQueue},
	{StmtType::synproxy, printSynproxy},
	{StmtType::xtMatch, printXtMatch},
	{StmtType::xtTarget,
	 [](const Output &, const Stmt &s) { return unknownText("xt target " + printable(std::get<Target>(*s.expression).name)); }},
	{StmtType::unknown,
	 [](const Output &, const Stmt &s) { return unknownText(s.expression ? printable(nameOf(*s.expression)) : "statement"); }},
};
constexpr bool inTypeOrder()
{
	for (size_t i = 0; i < std::size(kStatements); i++)
		if (size_t(kStatements[i].first) != i)
			return false;
	return std::size(kStatements) == size_t(StmtType::unknown) + 1;
}
static_assert(inTypeOrder(), "kStatements holds one print per StmtType, in its order");

} // namespace

std::string printStatement(const Output &output, const Stmt &s)
{
	return kStatements[size_t(s.type)].second(output, s);
}

} // namespace ipmasq::nft::text
