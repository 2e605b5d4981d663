// SPDX-License-Identifier: Apache-2.0
// The pod network's files over a fake clock: what the agent's table held at a start and a
// file not there yet, an edit that names another file or directory or removes a source, CNI
// files that come and go. No routes: nothing here needs privileges.
#include <catch2/catch.hpp>

#include <filesystem>

#include "../common/prefixes.h"
#include "ip-masq-agent/node/pod_network.h"
#include "scratch_dir.h"

using namespace ipmasq;
using test::prefix;
using test::texts;
using namespace std::chrono_literals;
using Clock = PodNetwork::Clock;
using Strings = std::vector<std::string>;

namespace {

const Clock::time_point t0{std::chrono::hours(1000)};

NonMasqueradeDiscovery section(const test::ScratchDir &dir, Duration holdDown = 30s)
{
	NonMasqueradeDiscovery s;
	s.within = {prefix("198.18.0.0/15")};
	s.flannelSubnetEnv = DiscoveryPath{dir.file("subnet.env"), {}};
	s.holdDown = holdDown;
	return s;
}

std::string conflist(const char *subnet)
{
	return std::string(R"({"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge", )") +
	       R"("ipam": {"type": "host-local", "ranges": [[{"subnet": ")" + subnet + R"("}]]}}]})";
}

// What is in force after the changes at `now`.
Strings inForce(PodNetwork &podNetwork, Clock::time_point now)
{
	(void)podNetwork.takeChanges(now);
	return texts(podNetwork.model().inForce());
}

} // namespace

TEST_CASE("pod network: at a start, a subnet.env not there yet keeps what the table held for Flannel, stale, "
	  "until it is there")
{
	test::ScratchDir dir;
	RangesBySource kept;
	kept.of(DiscoverySource::flannel) = {prefix("198.18.0.0/16")};
	PodNetwork podNetwork(section(dir), false, t0, &kept);
	CHECK(inForce(podNetwork, t0) == Strings{"198.18.0.0/16"});
	REQUIRE(podNetwork.model().inputs().size() == 1);
	CHECK(podNetwork.model().inputs()[0].state == DiscoveryInput::State::stale);
	CHECK(podNetwork.model().inputs()[0].reason == kNotThereYet);
	CHECK(inForce(podNetwork, t0 + 1h) == Strings{"198.18.0.0/16"});

	dir.write("subnet.env", "FLANNEL_NETWORK=198.19.0.0/16\n");
	podNetwork.onTimer(t0 + 2h);
	CHECK(inForce(podNetwork, t0 + 2h) == Strings{"198.18.0.0/16", "198.19.0.0/16"});
	CHECK(inForce(podNetwork, t0 + 2h + 30s) == Strings{"198.19.0.0/16"});
	CHECK(podNetwork.model().inputs()[0].state == DiscoveryInput::State::current);

	// A first start: the file not there yet is waited for, nothing is stale.
	test::ScratchDir other;
	const RangesBySource nothing;
	PodNetwork cold(section(other), false, t0, &nothing);
	CHECK(cold.model().inputs()[0].state == DiscoveryInput::State::absent);
}

TEST_CASE("pod network: an edit that names another subnet.env withdraws the old file's range and reads the new")
{
	test::ScratchDir dir;
	dir.write("subnet.env", "FLANNEL_NETWORK=198.18.0.0/16\n");
	dir.write("other.env", "FLANNEL_NETWORK=198.19.0.0/16\n");
	PodNetwork podNetwork(section(dir), false, t0);
	CHECK(inForce(podNetwork, t0) == Strings{"198.18.0.0/16"});
	NonMasqueradeDiscovery edited = section(dir);
	edited.flannelSubnetEnv = DiscoveryPath{dir.file("other.env"), {}};
	podNetwork.reconfigure(edited, t0 + 1s);
	CHECK(inForce(podNetwork, t0 + 1s) == Strings{"198.18.0.0/16", "198.19.0.0/16"});
	CHECK(inForce(podNetwork, t0 + 31s) == Strings{"198.19.0.0/16"});
	REQUIRE(podNetwork.model().inputs().size() == 1); // the old name is forgotten
	CHECK(podNetwork.model().inputs()[0].name == dir.file("other.env"));
}

TEST_CASE("pod network: an edit that names another CNI directory, or none, withdraws what the old one gave; "
	  "gone files are forgotten")
{
	test::ScratchDir dir;
	std::filesystem::create_directory(dir.path / "a");
	std::filesystem::create_directory(dir.path / "b");
	dir.write("a/10-pods.conflist", conflist("198.18.1.0/24"));
	dir.write("a/20-more.conflist", conflist("198.18.2.0/24"));
	dir.write("b/10-pods.conflist", conflist("198.18.3.0/24"));
	NonMasqueradeDiscovery s = section(dir);
	s.flannelSubnetEnv.reset();
	s.cniConfDir = DiscoveryPath{dir.file("a"), {}};
	PodNetwork podNetwork(s, false, t0);
	CHECK(inForce(podNetwork, t0) == Strings{"198.18.1.0/24", "198.18.2.0/24"});
	CHECK(podNetwork.model().stats().inputsPerSource[static_cast<size_t>(DiscoverySource::cni)] == 2);

	std::filesystem::remove(dir.path / "a/20-more.conflist");
	podNetwork.onTimer(t0 + 10s);
	CHECK(podNetwork.model().stats().inputsPerSource[static_cast<size_t>(DiscoverySource::cni)] == 1);
	CHECK(inForce(podNetwork, t0 + 40s) == Strings{"198.18.1.0/24"});

	s.cniConfDir = DiscoveryPath{dir.file("b"), {}};
	podNetwork.reconfigure(s, t0 + 50s);
	CHECK(inForce(podNetwork, t0 + 50s) == Strings{"198.18.1.0/24", "198.18.3.0/24"});
	CHECK(inForce(podNetwork, t0 + 80s) == Strings{"198.18.3.0/24"});
	CHECK(podNetwork.model().stats().inputsPerSource[static_cast<size_t>(DiscoverySource::cni)] == 1);

	s.cniConfDir.reset();
	podNetwork.reconfigure(s, t0 + 90s);
	CHECK(inForce(podNetwork, t0 + 90s) == Strings{"198.18.3.0/24"});
	CHECK(inForce(podNetwork, t0 + 120s).empty());
	CHECK(podNetwork.model().inputs().empty());
}

TEST_CASE("pod network: an edit of holdDown alone keeps a stale file's range and reads nothing again")
{
	test::ScratchDir dir;
	dir.write("subnet.env", "FLANNEL_NETWORK=198.18.0.0/16\n");
	PodNetwork podNetwork(section(dir), false, t0);
	CHECK(inForce(podNetwork, t0) == Strings{"198.18.0.0/16"});
	dir.write("subnet.env", "FLANNEL_NETWORK=not-a-cidr\n");
	podNetwork.onTimer(t0 + 10s);
	REQUIRE(podNetwork.model().inputs()[0].state == DiscoveryInput::State::stale);
	podNetwork.reconfigure(section(dir, 1s), t0 + 11s);
	CHECK(inForce(podNetwork, t0 + 1h) == Strings{"198.18.0.0/16"});
	CHECK(podNetwork.model().inputs()[0].state == DiscoveryInput::State::stale);
}
