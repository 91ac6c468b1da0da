// Grids larger than maxComputeWorkGroupCount[0] are split over y by the host; this is the
// linear workgroup index. Shaders bound-check it (the split may overshoot).
uint group_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
