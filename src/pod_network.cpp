// SPDX-License-Identifier: Apache-2.0
#include "ip-masq-agent/pod_network.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "ip-masq-agent/cni_conf.h"
#include "ip-masq-agent/config.h"
#include "ip-masq-agent/flannel_subnet_env.h"
#include "ip-masq-agent/log.h"

namespace ipmasq {

namespace {

std::string directoryOf(const std::string &path)
{
	const size_t slash = path.rfind('/');
	return slash == 0 ? "/" : path.substr(0, slash);
}

RouteFilter routeFilter(const NonMasqueradeDiscovery &section, bool ipv6)
{
	return RouteFilter{section.routeProtocols, section.routeInterfaces, section.within, ipv6};
}

} // namespace

PodNetwork::PodNetwork(const NonMasqueradeDiscovery &section, bool ipv6, Clock::time_point now)
	: section_(section),
	  ipv6_(ipv6),
	  model_(DiscoveredRanges::Settings{section.within, section.holdDown, ipv6, kMaxDiscoveredPrefixes})
{
	if (section_.followsRoutes()) {
		model_.expect(DiscoverySource::routes, DiscoveredRanges::kRoutesInput);
		followRoutes();
	}
	if (section_.flannelSubnetEnv)
		model_.expect(DiscoverySource::flannel, section_.flannelSubnetEnv->path);
	watchDirectories();
	readFiles(now);
}

PodNetwork::Fds PodNetwork::fds() const
{
	return {routes_ ? routes_->fd() : -1, watch_.isValid() ? watch_.get() : -1};
}

void PodNetwork::followRoutes()
{
	if (!routes_) {
		auto source = RouteSource::open(routeFilter(section_, ipv6_));
		if (source)
			routes_.emplace(std::move(*source));
		else
			routesError_ = source.error().message;
	}
	readRoutes(true);
}

void PodNetwork::readRoutes(bool reread)
{
	if (!routes_) {
		model_.markStale(DiscoverySource::routes, DiscoveredRanges::kRoutesInput,
				 "cannot follow the routes: " + routesError_);
		return;
	}
	RouteSourceUpdate read = reread ? routes_->reread() : routes_->drain();
	model_.applyRoutes(read.update, Clock::now());
	if (read.update.mustReread && !reread)
		return readRoutes(true); // once: reread() never asks for another
	if (read.failure) {
		routesStale_ = true;
		model_.markStale(DiscoverySource::routes, DiscoveredRanges::kRoutesInput, read.failure->message);
	} else if (reread) {
		routesStale_ = false;
		model_.markCurrent(DiscoverySource::routes, DiscoveredRanges::kRoutesInput);
	}
}

void PodNetwork::onReadable(Clock::time_point now)
{
	if (routes_)
		readRoutes(false);
	if (!watch_.isValid())
		return;
	// Events name what changed in a watched directory: any of them is a reason to read the
	// (small, bounded) files again; the events themselves are only drained.
	alignas(inotify_event) char buffer[4096];
	bool any = false;
	for (int i = 0; i < 64; i++) {
		const ssize_t n = read(watch_.get(), buffer, sizeof(buffer));
		if (n <= 0)
			break;
		any = true;
	}
	if (any)
		readFiles(now);
}

void PodNetwork::onTimer(Clock::time_point now)
{
	if (routes_ ? routesStale_ : section_.followsRoutes())
		followRoutes();
	if (now - lastRead_ >= kRetryPeriod) {
		if (watched_ < 2)
			watchDirectories(); // a directory that appeared since
		readFiles(now);
	}
}

PodNetwork::Clock::time_point PodNetwork::nextWake() const
{
	Clock::time_point next = lastRead_ + kRetryPeriod;
	if (const auto leaves = model_.nextWake(); leaves && *leaves < next)
		next = *leaves;
	return next;
}

void PodNetwork::watchDirectories()
{
	if (!watch_.isValid())
		watch_ = UniqueFd(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
	if (!watch_.isValid())
		return; // the timer reads the files all the same
	constexpr uint32_t kEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE;
	watched_ = 0;
	if (section_.flannelSubnetEnv &&
	    inotify_add_watch(watch_.get(), directoryOf(section_.flannelSubnetEnv->path).c_str(), kEvents) >= 0)
		watched_++;
	if (section_.cniConfDir && inotify_add_watch(watch_.get(), section_.cniConfDir->path.c_str(), kEvents) >= 0)
		watched_++;
	if (!section_.flannelSubnetEnv)
		watched_++;
	if (!section_.cniConfDir)
		watched_++;
}

void PodNetwork::readFiles(Clock::time_point now)
{
	lastRead_ = now;
	if (section_.flannelSubnetEnv)
		readFlannel(section_.flannelSubnetEnv->path, now);
	if (section_.cniConfDir)
		readCni(section_.cniConfDir->path, now);
}

void PodNetwork::readFlannel(const std::string &path, Clock::time_point now)
{
	auto read = readFlannelSubnetEnv(path);
	if (!read)
		return model_.markStale(DiscoverySource::flannel, path, read.error().message);
	if (!*read)
		return model_.markAbsent(DiscoverySource::flannel, path, now);
	std::vector<Sighting> sightings;
	for (const FlannelNetwork &network : (*read)->networks)
		sightings.push_back({network.prefix, fmt::format("{} in {}:{}", network.key, path, network.line)});
	model_.replace(DiscoverySource::flannel, path, std::move(sightings), now);
}

void PodNetwork::readCni(const std::string &dir, Clock::time_point now)
{
	auto read = readCniConfDir(dir);
	if (!read)
		return model_.markStale(DiscoverySource::cni, dir, read.error().message);
	std::set<std::string> present;
	for (const CniConfFile &file : read->value_or(std::vector<CniConfFile>{})) {
		present.insert(file.path);
		if (!file.conf) {
			model_.markStale(DiscoverySource::cni, file.path, file.conf.error().message);
			continue;
		}
		std::vector<Sighting> sightings;
		for (const CniSubnet &subnet : file.conf->subnets)
			sightings.push_back({subnet.prefix, fmt::format("{} ranges subnet in {}:{}", subnet.plugin,
									file.path, subnet.line)});
		model_.replace(DiscoverySource::cni, file.path, std::move(sightings), now);
	}
	// A file that went says nothing any more.
	std::vector<std::string> gone;
	for (const DiscoveryInput &input : model_.inputs())
		if (input.source == DiscoverySource::cni && !present.count(input.name) &&
		    input.state != DiscoveryInput::State::absent)
			gone.push_back(input.name);
	for (const std::string &name : gone)
		model_.markAbsent(DiscoverySource::cni, name, now);
}

LoadedConfig withPodNetworkReadOnce(LoadedConfig loaded, bool ipv6)
{
	const auto &section = loaded.config.nonMasqueradeDiscovery;
	if (!section)
		return loaded;
	PodNetwork podNetwork(*section, ipv6, PodNetwork::Clock::now());
	(void)podNetwork.takeChanges(PodNetwork::Clock::now()); // what it found is in force
	for (const DiscoveryMessage &message : podNetwork.takeMessages())
		message.warning ? log::warning("{}", message.text) : log::info("{}", message.text);
	putDiscovered(loaded.config, podNetwork.model());
	return loaded;
}

void putDiscovered(Config &config, const DiscoveredRanges &model)
{
	std::map<std::string, std::string> originsOf; // by prefix
	for (const DiscoveredRange &range : model.ranges()) {
		std::string &origins = originsOf[range.prefix.toString()];
		for (const DiscoveredRange::Origin &origin : range.origins)
			origins += (origins.empty() ? "" : "; ") + origin.text;
		if (origins.empty())
			origins = "withdrawn, in force until its hold-down ends";
	}
	// The ranges put before go first: the operator's own entries stay where they are.
	std::erase_if(config.nonMasqueradeCIDRs, [](const Prefix &prefix) { return prefix.origin.discovered(); });
	config.discoveredOrigins.clear();
	for (Prefix &prefix : model.inForce()) {
		prefix.origin = Origin{Origin::kDiscovered, static_cast<uint32_t>(config.discoveredOrigins.size())};
		config.discoveredOrigins.push_back(originsOf[prefix.toString()]);
		config.nonMasqueradeCIDRs.push_back(std::move(prefix));
	}
}

} // namespace ipmasq
