package sampler

// CPUFixture is fixtureWith for the package's external tests (enginetest
// imports sampler, so its check runs from package sampler_test).
var CPUFixture = fixtureWith
