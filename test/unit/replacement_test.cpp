// SPDX-License-Identifier: Apache-2.0
// planReplacement(): which counters a replacement keeps, what it deletes, and the values the
// counters it creates start at.
#include <catch2/catch.hpp>

#include <linux/netfilter/nf_tables.h>

#include "ip-masq-agent/nft/replacement.h"

using namespace ipmasq;
using namespace ipmasq::netlink;

namespace {

const std::string kComment = "managed by ip-masq-agent";

NamedCounter counter(const std::string &name)
{
	return NamedCounter{name, {}, "counts " + name};
}

Ruleset desiredWith(const std::vector<std::string> &counters)
{
	Ruleset ruleset;
	ruleset.comment = kComment;
	for (const std::string &name : counters)
		ruleset.counters.push_back(counter(name));
	return ruleset;
}

TableContents::Object held(const std::string &name, uint64_t packets)
{
	return TableContents::Object{name, NFT_OBJECT_COUNTER, "counts " + name, packets, packets * 60};
}

TableContents kernelWith(std::vector<TableContents::Object> objects)
{
	TableContents contents;
	contents.generation = 42;
	contents.comment = kComment;
	contents.chains = {"postrouting", "IP-MASQ-AGENT"};
	contents.sets = {"nomasq-v4"};
	contents.objects = std::move(objects);
	return contents;
}

std::vector<std::string> names(const std::vector<CounterValue> &values)
{
	std::vector<std::string> out;
	for (const CounterValue &value : values)
		out.push_back(value.name);
	return out;
}

} // namespace

TEST_CASE("replacement: the same counters are all kept, everything else is deleted by name")
{
	TableContents kernel = kernelWith({held("nomasq-dst-v4", 3), held("masq-v4", 7)});
	kernel.flowtables = {"ft"};
	const auto plan = planReplacement(kernel, desiredWith({"nomasq-dst-v4", "masq-v4"}), {});
	REQUIRE(plan);
	CHECK(plan->generation == 42);
	CHECK(plan->keptCounters == std::vector<std::string>{"nomasq-dst-v4", "masq-v4"});
	CHECK(plan->createdCounters.empty());
	CHECK(plan->deleteChains == kernel.chains);
	CHECK(plan->deleteSets == kernel.sets);
	CHECK(plan->deleteFlowtables == kernel.flowtables);
	CHECK(plan->deleteObjects.empty());
	CHECK(plan->keeps("masq-v4"));
	CHECK_FALSE(plan->keeps("snat-v4"));
}

TEST_CASE("replacement: another table comment or any flag means deleting the table")
{
	const Ruleset desired = desiredWith({"masq-v4"});
	TableContents kernel = kernelWith({held("masq-v4", 1)});
	kernel.comment = "someone else's";
	CHECK_FALSE(planReplacement(kernel, desired, {}));
	kernel.comment = kComment;
	kernel.flags = NFT_TABLE_F_DORMANT;
	CHECK_FALSE(planReplacement(kernel, desired, {}));
}

TEST_CASE("replacement: counters are kept only as a prefix in the kernel's order")
{
	SECTION("a new counter first: every one after it is made again, from the kernel's value")
	{
		const auto plan = planReplacement(kernelWith({held("nomasq-dst-v4", 3), held("masq-v4", 7)}),
						  desiredWith({"nomasq-src-v4", "nomasq-dst-v4", "masq-v4"}),
						  {});
		REQUIRE(plan);
		CHECK(plan->keptCounters.empty());
		CHECK(plan->createdCounters == std::vector<CounterValue>{{"nomasq-src-v4", 0, 0},
									{"nomasq-dst-v4", 3, 180},
									{"masq-v4", 7, 420}});
		CHECK(plan->deleteObjects == std::vector<std::pair<std::string, uint32_t>>{
						     {"nomasq-dst-v4", NFT_OBJECT_COUNTER},
						     {"masq-v4", NFT_OBJECT_COUNTER}});
	}
	SECTION("a new counter last: the others are kept")
	{
		const auto plan = planReplacement(kernelWith({held("nomasq-dst-v4", 3), held("masq-v4", 7)}),
						  desiredWith({"nomasq-dst-v4", "masq-v4", "masq-v6"}),
						  {{"masq-v6", 9, 900}});
		REQUIRE(plan);
		CHECK(plan->keptCounters == std::vector<std::string>{"nomasq-dst-v4", "masq-v4"});
		// Not in the kernel: the last value the agent saw of it.
		CHECK(plan->createdCounters == std::vector<CounterValue>{{"masq-v6", 9, 900}});
		CHECK(plan->deleteObjects.empty());
	}
	SECTION("the kernel's order differs from the desired: the prefix that agrees is kept")
	{
		const auto plan = planReplacement(kernelWith({held("masq-v4", 7), held("nomasq-dst-v4", 3)}),
						  desiredWith({"nomasq-dst-v4", "masq-v4"}), {});
		REQUIRE(plan);
		CHECK(plan->keptCounters == std::vector<std::string>{"nomasq-dst-v4"});
		CHECK(names(plan->createdCounters) == std::vector<std::string>{"masq-v4"});
		CHECK(plan->createdCounters.front().packets == 7);
	}
	SECTION("a counter dropped by the config is deleted; the rest keeps its place")
	{
		const auto plan = planReplacement(
			kernelWith({held("nomasq-src-v4", 1), held("nomasq-dst-v4", 3), held("masq-v4", 7)}),
			desiredWith({"nomasq-dst-v4", "masq-v4"}), {});
		REQUIRE(plan);
		CHECK(plan->keptCounters == std::vector<std::string>{"nomasq-dst-v4", "masq-v4"});
		CHECK(plan->deleteObjects == std::vector<std::pair<std::string, uint32_t>>{
						     {"nomasq-src-v4", NFT_OBJECT_COUNTER}});
	}
}

TEST_CASE("replacement: a counter with another comment, or an object of another type, is not kept")
{
	TableContents::Object edited = held("masq-v4", 7);
	edited.comment = "edited by hand";
	const TableContents::Object quota{"masq-v4", NFT_OBJECT_QUOTA, "", 0, 0};
	const auto plan = planReplacement(kernelWith({held("nomasq-dst-v4", 3), edited, quota}),
					  desiredWith({"nomasq-dst-v4", "masq-v4"}), {{"masq-v4", 1, 1}});
	REQUIRE(plan);
	CHECK(plan->keptCounters == std::vector<std::string>{"nomasq-dst-v4"});
	// The kernel's count wins over an older one the agent remembers.
	CHECK(plan->createdCounters == std::vector<CounterValue>{{"masq-v4", 7, 420}});
	CHECK(plan->deleteObjects == std::vector<std::pair<std::string, uint32_t>>{
					     {"masq-v4", NFT_OBJECT_COUNTER}, {"masq-v4", NFT_OBJECT_QUOTA}});
}
