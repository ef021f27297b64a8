#pragma once

#include "router/request_features.h"
#include "router/route_decision.h"
#include "tandem/v1/admin.pb.h"

namespace tandem::router {

// A decision's inputs and outcome as a record (for the decision log), and back (for replay).
tandem::v1::DecisionRecord ToRecord(const RequestFeatures& features, const RouteDecision& d);
RequestFeatures FeaturesFromRecord(const tandem::v1::DecisionRecord& record);

}  // namespace tandem::router
