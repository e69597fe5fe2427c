"""Reports on TraceTables: warp stalls, hierarchical roofline, occupancy, timeline, diff — tables plus findings."""
