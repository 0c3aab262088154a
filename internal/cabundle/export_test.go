package cabundle

// WithoutPlantedCAProtection turns off, until the returned func runs, what keeps a planted CA
// out of the bundle: the record of CAs once issued and the EndpointSlice controller's label.
// The negative controls of the tests use it.
func WithoutPlantedCAProtection() func() {
	enforceOnceIssued, onlyControllerSlices = false, false
	return func() { enforceOnceIssued, onlyControllerSlices = true, true }
}
